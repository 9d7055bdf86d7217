# /// script
# dependencies = ["numpy"]
# ///
# Packages come from the PEP 723 block above (or `viv run --with numpy`): the daemon
# installs them once, in a sandbox of their own, and binds the environment read-only.
import numpy as np

a = np.arange(1, 10, dtype=float).reshape(3, 3) + np.eye(3)
print("numpy", np.__version__)
print("det =", round(float(np.linalg.det(a)), 3))

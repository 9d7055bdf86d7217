//! `vivarium-zygote-init`: a zygote job's init (`vivarium_sandbox::zygote_init`), exec'd
//! by the zygote's vfork child with its fds named in argv.
#![forbid(unsafe_code)]

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    vivarium_sandbox::zygote_init::main(&args)
}

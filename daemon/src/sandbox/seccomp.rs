//! TEMPORARY stub until the seccomp layer lands.
use seccompiler::BpfProgram;
pub struct SeccompProgram {
    filters: Vec<BpfProgram>,
}
#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("stub")]
    Stub,
}
impl SeccompProgram {
    pub fn filter_count(&self) -> u32 {
        self.filters.len() as u32
    }
    pub fn filters(&self) -> &[BpfProgram] {
        &self.filters
    }
}
pub fn load(_path: &std::path::Path, _allow_inet: bool) -> Result<SeccompProgram, SeccompError> {
    use seccompiler::*;
    let mut rules = std::collections::BTreeMap::new();
    rules.insert(libc::SYS_acct, vec![]);
    let f = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(1),
        TargetArch::x86_64,
    )
    .unwrap();
    let p: BpfProgram = f.try_into().unwrap();
    Ok(SeccompProgram { filters: vec![p] })
}
impl SeccompProgram {
    pub fn to_wire(&self) -> Vec<Vec<(u16, u8, u8, u32)>> {
        self.filters
            .iter()
            .map(|f| f.iter().map(|i| (i.code, i.jt, i.jf, i.k)).collect())
            .collect()
    }
}

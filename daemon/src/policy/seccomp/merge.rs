//! One filter instead of a stack: the verdicts of the stacked filters, found by evaluating
//! them, behind a binary search on the syscall number.
//!
//! Why: installing a filter costs the kernel a pass over every syscall number through the
//! whole program (it precomputes which numbers are always allowed), and seccompiler's
//! programs are linear chains (about five instructions per syscall). The three stacked
//! filters took about 1 ms to install, most of a cold job's seccomp cost. The merged
//! program decides most numbers in about ten instructions.
//!
//! How, so that the verdicts stay exactly the stack's:
//! - Every filter must start with seccompiler's architecture check (load `arch`; equal to
//!   the target's audit value or return KILL_PROCESS). The merged program starts with the
//!   same three instructions: a foreign architecture got KILL_PROCESS from every filter.
//! - Past that check, a filter's path depends on the syscall number only through
//!   comparisons with the constants of its jump instructions, until it loads an argument.
//!   So the result is constant between consecutive points of
//!   `{0} ∪ {k, k + 1 : k a jump constant of any filter}`, and evaluating each filter at
//!   those points gives every number's result, or "depends on the arguments" when the
//!   evaluation reached an argument load.
//! - A number whose filters all answer without arguments gets the kernel's combination of
//!   those answers (most recently installed first, a strictly more restrictive action
//!   wins), as one `RET`. A number for which exactly one filter looks at the arguments
//!   while every other one allows it outright jumps into a copy of that filter, compiled
//!   with only its argument-checking rules (cBPF jumps are relative, so a whole program can
//!   be appended and entered at its start); its answer is then the stack's answer.
//! - Anything else (two filters checking the arguments of one number, an instruction this
//!   evaluator does not know) is not merged: [`merge`] returns `None` and the caller keeps
//!   the stack, which is as strict and only slower.
//!
//! The unit tests compare the merged program with the stack for every syscall number
//! (native and x32) and the argument values the rules look at.

use seccompiler::{sock_filter, BpfProgram};

const LD_W_ABS: u16 = 0x20;
const AND_K: u16 = 0x54;
const JA: u16 = 0x05;
const JEQ_K: u16 = 0x15;
const JGT_K: u16 = 0x25;
const JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;

/// `offsetof(struct seccomp_data, nr)` and `arch`.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ACTION_FULL: u32 = 0xffff_0000;

/// What one filter answers for one syscall number, arguments unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Answer {
    Ret(u32),
    /// The filter loads an argument (or the instruction pointer) before answering.
    NeedsArgs,
}

/// What the merged program does for a range of syscall numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Leaf {
    Ret(u32),
    /// Enter the copy of stack filter number `.0`.
    Enter(usize),
}

/// The stack `filters` (installation order) as one program with the same verdict for every
/// `seccomp_data`, or `None` when it cannot be merged (see the module docs). `checks[i]` is
/// what is copied in for the numbers whose verdict `filters[i]` takes from the arguments:
/// `filters[i]` itself, or a version of it with only its argument-checking rules (the same
/// rules for those numbers, shorter to compile).
pub(super) fn merge(filters: &[BpfProgram], checks: &[BpfProgram]) -> Option<BpfProgram> {
    let prefix = arch_prefix(filters.first()?)?;
    if checks.len() != filters.len()
        || filters
            .iter()
            .chain(checks)
            .any(|f| arch_prefix(f) != Some(prefix))
    {
        return None;
    }
    let audit_arch = prefix[1].k;

    let mut points: Vec<u32> = vec![0];
    for insn in filters.iter().flatten() {
        match insn.code {
            JEQ_K | JGT_K | JGE_K => {
                points.push(insn.k);
                points.extend(insn.k.checked_add(1));
            }
            LD_W_ABS | AND_K | JA | RET_K => {}
            _ => return None,
        }
    }
    points.sort_unstable();
    points.dedup();

    // Runs of numbers with the same leaf: (first number, leaf), ascending.
    let mut runs: Vec<(u32, Leaf)> = Vec::new();
    for &nr in &points {
        let leaf = leaf_for(filters, audit_arch, nr)?;
        if runs.last().map(|&(_, l)| l) != Some(leaf) {
            runs.push((nr, leaf));
        }
    }

    let mut program: BpfProgram = prefix.to_vec();
    program.push(stmt(LD_W_ABS, NR_OFFSET));
    let mut entries = Vec::new();
    emit_tree(&runs, &mut program, &mut entries);
    // Append each filter that some leaf enters, and point those leaves at it.
    let mut starts: Vec<Option<usize>> = vec![None; filters.len()];
    for &(_, index) in &entries {
        if starts[index].is_none() {
            starts[index] = Some(program.len());
            program.extend_from_slice(&checks[index]);
        }
    }
    for (at, index) in entries {
        let target = starts[index]?;
        program[at].k = u32::try_from(target - at - 1).ok()?;
    }
    Some(program)
}

/// seccompiler's architecture check: `ld arch; jeq AUDIT, 1, 0; ret KILL_PROCESS`.
fn arch_prefix(filter: &BpfProgram) -> Option<&[sock_filter]> {
    let p = filter.get(..3)?;
    let ok = p[0].code == LD_W_ABS
        && p[0].k == ARCH_OFFSET
        && p[1].code == JEQ_K
        && (p[1].jt, p[1].jf) == (1, 0)
        && p[2].code == RET_K
        && p[2].k == RET_KILL_PROCESS;
    ok.then_some(p)
}

fn leaf_for(filters: &[BpfProgram], audit_arch: u32, nr: u32) -> Option<Leaf> {
    let answers: Vec<Answer> = filters
        .iter()
        .map(|f| answer(f, audit_arch, nr))
        .collect::<Option<_>>()?;
    let needs_args: Vec<usize> = (0..answers.len())
        .filter(|&i| answers[i] == Answer::NeedsArgs)
        .collect();
    match needs_args[..] {
        [] => {
            // seccomp_run_filters: most recently installed first; a strictly lower action
            // value (a more restrictive action) replaces the result, data included.
            let action = |ret: u32| (ret & RET_ACTION_FULL) as i32;
            let mut ret = RET_ALLOW;
            for a in answers.iter().rev() {
                if let Answer::Ret(cur) = *a {
                    if action(cur) < action(ret) {
                        ret = cur;
                    }
                }
            }
            Some(Leaf::Ret(ret))
        }
        [only]
            if answers
                .iter()
                .enumerate()
                .all(|(i, a)| i == only || *a == Answer::Ret(RET_ALLOW)) =>
        {
            Some(Leaf::Enter(only))
        }
        _ => None,
    }
}

/// Runs `filter` for syscall `nr` on the target architecture until it answers or loads
/// anything but `nr` and `arch`. `None` for an instruction outside the subset handled here,
/// including arithmetic on `nr` (the result would not be constant between the points).
fn answer(filter: &BpfProgram, audit_arch: u32, nr: u32) -> Option<Answer> {
    let (mut acc, mut pc) = (0u32, 0usize);
    loop {
        let insn = filter.get(pc)?;
        pc += 1;
        let branch = |taken: bool| usize::from(if taken { insn.jt } else { insn.jf });
        match insn.code {
            LD_W_ABS => match insn.k {
                NR_OFFSET => acc = nr,
                ARCH_OFFSET => acc = audit_arch,
                _ => return Some(Answer::NeedsArgs),
            },
            JA => pc = pc.checked_add(usize::try_from(insn.k).ok()?)?,
            JEQ_K => pc += branch(acc == insn.k),
            JGT_K => pc += branch(acc > insn.k),
            JGE_K => pc += branch(acc >= insn.k),
            RET_K => return Some(Answer::Ret(insn.k)),
            _ => return None,
        }
    }
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

/// A binary search over `runs` (non-empty, ascending): each leaf is one instruction, a
/// `RET` or a `JA` whose offset is patched later (its index and filter go to `entries`).
fn emit_tree(runs: &[(u32, Leaf)], out: &mut BpfProgram, entries: &mut Vec<(usize, usize)>) {
    if let [(_, leaf)] = runs {
        match *leaf {
            Leaf::Ret(k) => out.push(stmt(RET_K, k)),
            Leaf::Enter(index) => {
                entries.push((out.len(), index));
                out.push(stmt(JA, 0));
            }
        }
        return;
    }
    let mid = runs.len() / 2;
    let split = runs[mid].0;
    // [jge split] [numbers below: left] [numbers from split on: right]
    let mut left = BpfProgram::new();
    let mut left_entries = Vec::new();
    emit_tree(&runs[..mid], &mut left, &mut left_entries);
    let jump = out.len();
    match u8::try_from(left.len()) {
        Ok(over_left) => out.push(sock_filter {
            code: JGE_K,
            jt: over_left,
            jf: 0,
            k: split,
        }),
        Err(_) => {
            // Too far for an 8-bit offset: the taken branch goes through a JA.
            out.push(sock_filter {
                code: JGE_K,
                jt: 0,
                jf: 1,
                k: split,
            });
            out.push(stmt(JA, left.len() as u32));
        }
    }
    let base = out.len();
    out.extend(left);
    entries.extend(left_entries.into_iter().map(|(at, i)| (at + base, i)));
    debug_assert!(jump < base);
    emit_tree(&runs[mid..], out, entries);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A search over many runs needs jumps past 255 instructions: the long form is taken
    /// and every number still lands on its own run's leaf.
    #[test]
    fn binary_search_reaches_every_run_even_past_short_jumps() {
        let arch = 0xc000_003e;
        let runs: Vec<(u32, Leaf)> = (0..1500u32)
            .map(|i| (i * 3, Leaf::Ret(i % 7 + 1)))
            .collect();
        let mut program: BpfProgram = vec![
            stmt(LD_W_ABS, ARCH_OFFSET),
            sock_filter {
                code: JEQ_K,
                jt: 1,
                jf: 0,
                k: arch,
            },
            stmt(RET_K, RET_KILL_PROCESS),
            stmt(LD_W_ABS, NR_OFFSET),
        ];
        let mut entries = Vec::new();
        emit_tree(&runs, &mut program, &mut entries);
        assert!(entries.is_empty());
        assert!(program
            .iter()
            .any(|i| i.code == JGE_K && (i.jt, i.jf) == (0, 1)));
        for nr in 0..4600u32 {
            let want = (nr / 3).min(1499) % 7 + 1;
            assert_eq!(
                answer(&program, arch, nr),
                Some(Answer::Ret(want)),
                "nr {nr}"
            );
        }
        assert_eq!(
            answer(&program, arch, u32::MAX),
            Some(Answer::Ret(1499 % 7 + 1))
        );
    }

    #[test]
    fn a_filter_without_seccompilers_arch_check_is_not_merged() {
        let allow_all: BpfProgram = vec![stmt(RET_K, RET_ALLOW)];
        let one = std::slice::from_ref(&allow_all);
        assert!(merge(one, one).is_none());
    }
}

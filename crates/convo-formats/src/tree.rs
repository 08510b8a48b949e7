//! Parent links of tree-shaped exports (ChatGPT's `mapping`, Claude's
//! `parent_message_uuid`), checked before they are walked: a link to a
//! message that is not there (`parent-dangling`) or links that loop
//! (`parent-cycle`, a self-parent included) are errors naming the message
//! ids, never a silently empty or made-up conversation.

/// The first cycle in `parent` (index → parent index), as the indices
/// around it starting from where it was entered, or `None`. Linear time.
pub fn find_cycle(parent: &[Option<usize>]) -> Option<Vec<usize>> {
    find_cycle_in(parent.len(), |i| parent[i])
}

/// [`find_cycle`] of `n` nodes whose parents `parent` gives (without a
/// list of them).
pub fn find_cycle_in(n: usize, parent: impl Fn(usize) -> Option<usize>) -> Option<Vec<usize>> {
    // 0: not seen, 1: on the current walk, 2: known to reach a root.
    let mut state = vec![0u8; n];
    let mut walk = Vec::new();
    for start in 0..n {
        walk.clear();
        let mut at = Some(start);
        while let Some(i) = at {
            match state.get(i).copied() {
                Some(0) => {
                    state[i] = 1;
                    walk.push(i);
                    at = parent(i);
                }
                Some(1) => {
                    let from = walk.iter().position(|&w| w == i).unwrap_or(0);
                    return Some(walk[from..].to_vec());
                }
                _ => break,
            }
        }
        for &w in &walk {
            state[w] = 2;
        }
    }
    None
}

/// `"a" → "b" → "a"`: a cycle for an error message.
pub fn show_cycle(ids: &[String]) -> String {
    let mut parts: Vec<String> = ids.iter().map(|i| format!("{i:?}")).collect();
    if let Some(first) = parts.first().cloned() {
        parts.push(first);
    }
    parts.join(" → ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_are_found_and_trees_pass() {
        assert_eq!(find_cycle(&[None, Some(0), Some(1), Some(0)]), None);
        assert_eq!(find_cycle(&[Some(0)]), Some(vec![0]));
        assert_eq!(find_cycle(&[Some(1), Some(0), Some(0)]), Some(vec![0, 1]));
        assert_eq!(
            find_cycle(&[None, Some(3), Some(1), Some(2)]),
            Some(vec![1, 3, 2])
        );
        assert_eq!(
            show_cycle(&["m1".into(), "m2".into()]),
            "\"m1\" → \"m2\" → \"m1\""
        );
    }
}

//! `--show-tree`: the tree as indented text, one node per line with its length and tokens.

use super::tree::{NodeId, RadixTree};
use std::fmt::Write;

/// One line per node, children indented under their parent in order of their first page. Shows
/// at most `max_tokens` tokens of a node, as words when `words` is given.
pub fn render_tree(tree: &RadixTree, words: Option<&[String]>, max_tokens: usize) -> String {
    let mut out = format!(
        "root: {} tokens in {} nodes (page size {})\n",
        tree.total_tokens(),
        tree.node_count(),
        tree.page_size()
    );
    let mut stack: Vec<(NodeId, usize)> = tree
        .children(tree.root())
        .into_iter()
        .rev()
        .map(|c| (c, 1))
        .collect();
    while let Some((id, depth)) = stack.pop() {
        let info = tree.info(id).expect("children are live");
        let shown: Vec<String> = info
            .tokens
            .iter()
            .take(max_tokens)
            .map(|&t| match words.and_then(|w| w.get(t as usize)) {
                Some(w) => w.clone(),
                None => t.to_string(),
            })
            .collect();
        let more = info.tokens.len().saturating_sub(max_tokens);
        let _ = write!(
            out,
            "{}[{}] {}",
            "  ".repeat(depth),
            info.tokens.len(),
            shown.join(" ")
        );
        if more > 0 {
            let _ = write!(out, " …(+{more})");
        }
        if info.lock_ref > 0 {
            let _ = write!(out, " locked×{}", info.lock_ref);
        }
        out.push('\n');
        stack.extend(tree.children(id).into_iter().rev().map(|c| (c, depth + 1)));
    }
    out
}

//! The response as every client encoder sees it: the events folded into output blocks in order
//! (text, thinking, tool call), the last usage, the finish reason or the error, and the
//! [`Change`]s each event makes, which stream encoders turn into frames.
//!
//! One block is open at a time: text or thinking extends the open block of its kind, anything
//! else closes it first. A tool call's arguments always go to that call's block (decoders never
//! interleave calls; if one did, the fragment is still addressed to its own block). A tool call
//! whose arguments stayed empty gets `{}` when it closes, so every client sees a JSON object.
//! After `Finish` only usage is taken; after `Error`, nothing.

use crate::ir::{Event, FinishReason, Usage};

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Block {
    Text(String),
    Thinking {
        text: String,
        signature: String,
    },
    Tool {
        /// The tool call's index among the response's calls.
        index: usize,
        id: String,
        name: String,
        arguments: String,
    },
}

/// What one event did to the output; `usize` is the block's position in [`Output::blocks`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    /// A block was added, still empty.
    Open(usize),
    /// Text appended to a text or thinking block.
    Text(usize, String),
    /// A signature appended to a thinking block.
    Signature(usize, String),
    /// A fragment appended to a tool call's arguments.
    Args(usize, String),
    /// The block is complete.
    Close(usize),
    /// The finish reason arrived (the open block was closed just before).
    Finish,
    /// The supplier reported an error (the open block was closed just before).
    Error(String),
}

#[derive(Debug, Default)]
pub(super) struct Output {
    pub blocks: Vec<Block>,
    open: Option<usize>,
    pub usage: Option<Usage>,
    pub finish: Option<FinishReason>,
    pub error: Option<String>,
}

impl Output {
    /// Folds one event in; pushes what it changed.
    pub fn apply(&mut self, event: Event, changes: &mut Vec<Change>) {
        if self.error.is_some() {
            return;
        }
        if self.finish.is_some() {
            if let Event::Usage(usage) = event {
                self.usage = Some(usage);
            }
            return;
        }
        match event {
            Event::Start { .. } => {}
            Event::Text(text) => self.append(text, false, changes),
            Event::Thinking(text) => self.append(text, true, changes),
            Event::ThinkingSignature(signature) => {
                let pos = match self.open_block() {
                    Some((pos, Block::Thinking { .. })) => pos,
                    _ => self.open(
                        Block::Thinking {
                            text: String::new(),
                            signature: String::new(),
                        },
                        changes,
                    ),
                };
                if let Some(Block::Thinking { signature: sig, .. }) = self.blocks.get_mut(pos) {
                    sig.push_str(&signature);
                }
                changes.push(Change::Signature(pos, signature));
            }
            Event::ToolCallStart { index, id, name } => {
                if self.tool(index).is_none() {
                    self.open(
                        Block::Tool {
                            index,
                            id,
                            name,
                            arguments: String::new(),
                        },
                        changes,
                    );
                }
            }
            Event::ToolCallArgs { index, fragment } => {
                let pos = match self.tool(index) {
                    Some(pos) => pos,
                    None => self.open(
                        Block::Tool {
                            index,
                            id: format!("call_{index}"),
                            name: String::new(),
                            arguments: String::new(),
                        },
                        changes,
                    ),
                };
                if let Some(Block::Tool { arguments, .. }) = self.blocks.get_mut(pos) {
                    arguments.push_str(&fragment);
                }
                changes.push(Change::Args(pos, fragment));
            }
            Event::Usage(usage) => self.usage = Some(usage),
            Event::Finish(reason) => {
                self.close(changes);
                self.finish = Some(reason);
                changes.push(Change::Finish);
            }
            Event::Error { message } => {
                self.close(changes);
                self.error = Some(message.clone());
                changes.push(Change::Error(message));
            }
        }
    }

    /// Closes the open block, if any (the stream ends, or another block begins).
    pub fn close(&mut self, changes: &mut Vec<Change>) {
        let Some(pos) = self.open.take() else {
            return;
        };
        if let Some(Block::Tool { arguments, .. }) = self.blocks.get_mut(pos)
            && arguments.trim().is_empty()
        {
            arguments.push_str("{}");
            changes.push(Change::Args(pos, "{}".to_string()));
        }
        changes.push(Change::Close(pos));
    }

    /// The text of every text block, concatenated.
    pub fn text(&self) -> String {
        self.blocks
            .iter()
            .filter_map(|block| match block {
                Block::Text(text) => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The text of every thinking block, concatenated.
    pub fn thinking(&self) -> String {
        self.blocks
            .iter()
            .filter_map(|block| match block {
                Block::Thinking { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect()
    }

    fn append(&mut self, text: String, thinking: bool, changes: &mut Vec<Change>) {
        if text.is_empty() {
            return;
        }
        let pos = match self.open_block() {
            Some((pos, Block::Text(_))) if !thinking => pos,
            Some((pos, Block::Thinking { .. })) if thinking => pos,
            _ if thinking => self.open(
                Block::Thinking {
                    text: String::new(),
                    signature: String::new(),
                },
                changes,
            ),
            _ => self.open(Block::Text(String::new()), changes),
        };
        if let Some(Block::Text(sofar) | Block::Thinking { text: sofar, .. }) =
            self.blocks.get_mut(pos)
        {
            sofar.push_str(&text);
        }
        changes.push(Change::Text(pos, text));
    }

    fn open_block(&self) -> Option<(usize, &Block)> {
        let pos = self.open?;
        self.blocks.get(pos).map(|block| (pos, block))
    }

    fn tool(&self, index: usize) -> Option<usize> {
        self.blocks
            .iter()
            .position(|block| matches!(block, Block::Tool { index: i, .. } if *i == index))
    }

    fn open(&mut self, block: Block, changes: &mut Vec<Change>) -> usize {
        self.close(changes);
        self.blocks.push(block);
        let pos = self.blocks.len() - 1;
        self.open = Some(pos);
        changes.push(Change::Open(pos));
        pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fold(events: Vec<Event>) -> (Output, Vec<Change>) {
        let mut output = Output::default();
        let mut changes = Vec::new();
        for event in events {
            output.apply(event, &mut changes);
        }
        (output, changes)
    }

    #[test]
    fn blocks_open_and_close_in_order() {
        let (output, changes) = fold(vec![
            Event::Thinking("a".into()),
            Event::ThinkingSignature("s".into()),
            Event::Text("b".into()),
            Event::Text("c".into()),
            Event::ToolCallStart {
                index: 0,
                id: "t".into(),
                name: "f".into(),
            },
            Event::Finish(FinishReason::ToolCalls),
            Event::Text("ignored".into()),
            Event::Usage(Usage::default()),
        ]);
        assert_eq!(
            changes,
            vec![
                Change::Open(0),
                Change::Text(0, "a".into()),
                Change::Signature(0, "s".into()),
                Change::Close(0),
                Change::Open(1),
                Change::Text(1, "b".into()),
                Change::Text(1, "c".into()),
                Change::Close(1),
                Change::Open(2),
                Change::Args(2, "{}".into()),
                Change::Close(2),
                Change::Finish,
            ]
        );
        assert_eq!(output.text(), "bc");
        assert_eq!(output.usage, Some(Usage::default()));
        assert_eq!(
            output.blocks[2],
            Block::Tool {
                index: 0,
                id: "t".into(),
                name: "f".into(),
                arguments: "{}".into()
            }
        );
    }

    #[test]
    fn nothing_after_an_error() {
        let (output, changes) = fold(vec![
            Event::Text("x".into()),
            Event::Error {
                message: "boom".into(),
            },
            Event::Finish(FinishReason::Stop),
        ]);
        assert_eq!(changes.last(), Some(&Change::Error("boom".into())));
        assert_eq!(output.finish, None);
    }
}

//! [`Printer`]: every command's output, as JSON or as a table.

use std::io::Write;

use anyhow::Context as _;
use serde::Serialize;

use crate::cli::Format;

/// Writes reports in the chosen format.
pub(crate) struct Printer<'a> {
    out: &'a mut dyn Write,
    pub(crate) format: Format,
}

impl<'a> Printer<'a> {
    pub(crate) fn new(out: &'a mut dyn Write, format: Format) -> Self {
        Printer { out, format }
    }

    /// One pretty JSON document, or the table `render` makes.
    pub(crate) fn report<T: Serialize>(
        &mut self,
        value: &T,
        render: impl Fn(&T) -> String,
    ) -> anyhow::Result<()> {
        let text = match self.format {
            Format::Json => {
                let mut json =
                    serde_json::to_string_pretty(value).context("cannot encode the report")?;
                json.push('\n');
                json
            }
            Format::Table => render(value),
        };
        self.write(&text)
    }

    pub(crate) fn write(&mut self, text: &str) -> anyhow::Result<()> {
        self.out
            .write_all(text.as_bytes())
            .context("cannot write the output")
    }
}

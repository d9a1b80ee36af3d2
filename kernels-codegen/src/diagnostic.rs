//! Errors as the user sees them: a message, the original `file:line:column`, the source line
//! with the offending span underlined, and notes.

use crate::source::Location;
use std::fmt::Write as _;

/// One compile error of the macro.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The kernel the error belongs to, if any.
    pub kernel: Option<String>,
    /// The headline.
    pub message: String,
    /// Where in an original file, if known.
    pub location: Option<Location>,
    /// Text under the underline.
    pub label: String,
    /// Extra lines (`= note: …`).
    pub notes: Vec<String>,
    /// Other kernels with the same error (in code they share), reported once.
    pub also: Vec<String>,
    /// The variants the error is in, where that is not every variant it was looked for in:
    /// empty for an error of the preferred variant (["in the variant without subgroups (…)"]).
    pub variants: Vec<String>,
}

impl Diagnostic {
    /// An error without a location.
    pub fn new(message: impl Into<String>) -> Self {
        Diagnostic {
            kernel: None,
            message: message.into(),
            location: None,
            label: String::new(),
            notes: Vec::new(),
            also: Vec::new(),
            variants: Vec::new(),
        }
    }

    /// An error at a location.
    pub fn at(location: Location, message: impl Into<String>) -> Self {
        Diagnostic { location: Some(location), ..Diagnostic::new(message) }
    }

    /// Sets the label under the highlighted span.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    /// Adds a note.
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.notes.push(note.into());
        self
    }

    /// Says which variant the error is in (see [`Conditions::describe`](crate::split::Conditions::describe)).
    pub fn in_variant(mut self, description: Option<String>) -> Self {
        if let Some(d) = description
            && !self.variants.contains(&d)
        {
            self.variants.push(d);
        }
        self
    }

    /// Whether `other` is the same error, in whichever variant.
    fn same_error(&self, other: &Diagnostic) -> bool {
        self.kernel == other.kernel
            && self.message == other.message
            && self.location == other.location
            && self.label == other.label
            && self.notes == other.notes
    }

    /// Adds `d` to `errors` unless the same error (in another variant) is there already; then
    /// the one kept says every variant it is in, or none if one of them is the preferred one.
    pub fn push_once(errors: &mut Vec<Diagnostic>, d: Diagnostic) {
        match errors.iter_mut().find(|e| e.same_error(&d)) {
            Some(e) => {
                if e.variants.is_empty() || d.variants.is_empty() {
                    e.variants.clear();
                } else {
                    for v in d.variants {
                        if !e.variants.contains(&v) {
                            e.variants.push(v);
                        }
                    }
                }
            }
            None => errors.push(d),
        }
    }

    /// Names the kernel the error belongs to.
    pub fn in_kernel(mut self, kernel: &str) -> Self {
        self.kernel = Some(kernel.to_string());
        self
    }

    /// Renders the error the way rustc renders its own, so that it reads naturally inside
    /// the `compile_error!` it becomes.
    pub fn render(&self) -> String {
        let mut out = String::new();
        match (&self.kernel, self.also.as_slice()) {
            (Some(kernel), []) => {
                let _ = write!(out, "kernel `{kernel}`: ");
            }
            (Some(kernel), also) => {
                let names: Vec<String> = std::iter::once(kernel).chain(also).map(|k| format!("`{k}`")).collect();
                let (last, rest) = names.split_last().unwrap_or((&names[0], &[]));
                let _ = write!(out, "kernels {} and {last}: ", rest.join(", "));
            }
            (None, _) => {}
        }
        out.push_str(&self.message);
        if let Some(loc) = &self.location {
            let gutter = loc.line.to_string().len();
            let pad = " ".repeat(gutter);
            // Not rustc's `-->`: tools that rewrite rustc's own locations (trybuild) would
            // strip the line numbers of the WGSL file.
            let _ = write!(out, "\n{pad} ┌─ {}:{}:{}", loc.file, loc.line, loc.column);
            let _ = write!(out, "\n{pad} │");
            let _ = write!(out, "\n{} │ {}", loc.line, loc.line_text.replace('\t', "    "));
            // Tabs before the column widen the underline's indent the same way.
            let before: String = loc.line_text.chars().take(loc.column - 1).collect();
            let indent = before.replace('\t', "    ").chars().count();
            let _ = write!(out, "\n{pad} │ {}{}", " ".repeat(indent), "^".repeat(loc.width));
            if !self.label.is_empty() {
                let _ = write!(out, " {}", self.label);
            }
        }
        for note in &self.notes {
            let _ = write!(out, "\n = note: {note}");
        }
        if !self.variants.is_empty() {
            let _ = write!(out, "\n = note: {}", self.variants.join("; and "));
        }
        out
    }

    /// Merges errors that differ only in their kernel (an error in code several kernels share):
    /// one error naming every kernel.
    pub fn merge(errors: impl IntoIterator<Item = Diagnostic>) -> Vec<Diagnostic> {
        let mut out: Vec<Diagnostic> = Vec::new();
        for d in errors {
            let same = out.iter_mut().find(|o| {
                o.message == d.message
                    && o.location == d.location
                    && o.label == d.label
                    && o.notes == d.notes
                    && o.variants == d.variants
                    && o.kernel.is_some()
                    && d.kernel.is_some()
            });
            match same {
                Some(o) => {
                    if let Some(k) = d.kernel
                        && o.kernel.as_ref() != Some(&k)
                        && !o.also.contains(&k)
                    {
                        o.also.push(k);
                    }
                }
                None => out.push(d),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_errors_are_reported_once_for_every_kernel() {
        let loc = Location { file: "s.wgsl".into(), line: 1, column: 1, line_text: "x".into(), width: 1 };
        let e = |k: &str| Diagnostic::at(loc.clone(), "bad").in_kernel(k);
        let merged = Diagnostic::merge([e("a"), e("b"), e("c"), Diagnostic::at(loc.clone(), "other").in_kernel("a")]);
        assert_eq!(merged.len(), 2);
        assert!(merged[0].render().starts_with("kernels `a`, `b` and `c`: bad"), "{}", merged[0].render());
        assert!(merged[1].render().starts_with("kernel `a`: other"));
    }

    #[test]
    fn an_error_of_several_variants_is_reported_once() {
        let loc = Location { file: "s.wgsl".into(), line: 1, column: 1, line_text: "x".into(), width: 1 };
        let e = |v: Option<&str>| Diagnostic::at(loc.clone(), "bad").in_kernel("k").in_variant(v.map(String::from));
        let mut errors = Vec::new();
        Diagnostic::push_once(&mut errors, e(Some("in the variant without subgroups")));
        Diagnostic::push_once(&mut errors, e(Some("in the variant without coop")));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].variants.len(), 2);
        assert!(errors[0].render().ends_with("in the variant without subgroups; and in the variant without coop"));
        // Also in the preferred variant: no variant to name.
        Diagnostic::push_once(&mut errors, e(None));
        assert_eq!(errors.len(), 1);
        assert!(errors[0].variants.is_empty());
        Diagnostic::push_once(&mut errors, e(Some("in the variant without coop")));
        assert!(errors[0].variants.is_empty());
    }

    #[test]
    fn renders_like_rustc() {
        let loc = Location {
            file: "shaders/a.wgsl".into(),
            line: 12,
            column: 5,
            line_text: "    let x = 1;".into(),
            width: 3,
        };
        let d = Diagnostic::at(loc, "bad thing").label("here").note("more").in_kernel("k");
        assert_eq!(
            d.render(),
            "kernel `k`: bad thing\n   ┌─ shaders/a.wgsl:12:5\n   │\n12 │     let x = 1;\n   │     ^^^ here\n = note: more"
        );
    }
}

//! Stage 3a: the module-scope declarations of a file — each with its name and the names its
//! text mentions — so that a kernel's source holds only what its section reaches.
//!
//! A kernel's section is kept whole; from the shared preamble, the file preamble and included
//! files, [`assemble`](crate::assemble) keeps the declarations the section names, directly or
//! through other kept declarations (by name, textually: a conservative closure, since a name
//! that is only a local variable or a field keeps a declaration of that name too). What no
//! kernel reaches is checked once per file ([`compile`](crate::compile)), not once per kernel,
//! and a helper a kernel never calls cannot make it need f16, subgroups or workgroup memory.
//!
//! The scanner reads WGSL's module scope only: attributes, then `fn`/`struct` (up to the
//! matching `}`) or `const`/`override`/`var`/`alias`/`const_assert`/directives (up to `;`).
//! Text it does not understand makes the whole file one declaration that is always kept, so a
//! scanning mistake can cost size, never correctness; naga checks what is kept.

use std::ops::Range;

/// What decides whether a declaration is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Kept where its name is reached: the keyword that declares it (`fn`, `struct`, `const`,
    /// `override`, `var`, `alias`) and the name.
    Named(&'static str, String),
    /// Always kept: `const_assert`, directives, compute entry points, text the scanner did not
    /// understand.
    Always,
    /// Never kept: an entry point of another stage (`@vertex`, `@fragment`, `@task`, `@mesh`),
    /// by name. Such entry points are not kernels; a file that holds a render pipeline's
    /// shaders beside its compute kernels builds its kernels without them.
    OtherStage(String),
    /// Comments and blank lines after the last declaration (they mention no names).
    Trailing,
}

/// One module-scope declaration (or directive).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decl {
    /// The declaration's bytes in the file, with the comments and blank lines before it back to
    /// the previous declaration (so that its doc comment goes where it goes).
    pub range: Range<usize>,
    /// Whether it is kept.
    pub role: Role,
    /// The identifiers its text mentions.
    pub refs: Vec<String>,
}

/// The declarations of a part of a file, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outline {
    /// The declarations.
    pub decls: Vec<Decl>,
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b >= 0x80
}

/// The identifiers of `code` (comments already masked), each once.
pub fn identifiers(code: &str) -> Vec<String> {
    let bytes = code.as_bytes();
    let mut out: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut i = 0;
    while i < bytes.len() {
        if is_ident_start(bytes[i]) && (i == 0 || !is_ident_byte(bytes[i - 1])) {
            let start = i;
            while i < bytes.len() && is_ident_byte(bytes[i]) {
                i += 1;
            }
            let word = &code[start..i];
            if seen.insert(word) {
                out.push(word.to_string());
            }
        } else {
            i += 1;
        }
    }
    out
}

struct Scanner<'a> {
    code: &'a [u8],
    text: &'a str,
    pos: usize,
    end: usize,
}

impl Scanner<'_> {
    fn skip_ws(&mut self) {
        while self.pos < self.end && self.code[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn ident(&mut self) -> Option<&str> {
        self.skip_ws();
        let start = self.pos;
        if self.pos < self.end && is_ident_start(self.code[self.pos]) {
            while self.pos < self.end && is_ident_byte(self.code[self.pos]) {
                self.pos += 1;
            }
            Some(&self.text[start..self.pos])
        } else {
            None
        }
    }

    /// From an opening bracket at `pos`, past its matching closing one.
    fn balanced(&mut self) -> Option<()> {
        let mut depth = 0usize;
        while self.pos < self.end {
            match self.code[self.pos] {
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => {
                    depth = depth.checked_sub(1)?;
                    if depth == 0 {
                        self.pos += 1;
                        return Some(());
                    }
                }
                _ => {}
            }
            self.pos += 1;
        }
        None
    }

    /// Past the `;` that ends a declaration (outside brackets).
    fn past_semicolon(&mut self) -> Option<()> {
        while self.pos < self.end {
            match self.code[self.pos] {
                b';' => {
                    self.pos += 1;
                    return Some(());
                }
                b'(' | b'[' | b'{' => self.balanced()?,
                b')' | b']' | b'}' => return None,
                _ => self.pos += 1,
            }
        }
        None
    }

    /// Past the body of a `fn` or `struct`: the first `{` outside parentheses, to its `}`.
    fn past_body(&mut self) -> Option<()> {
        while self.pos < self.end {
            match self.code[self.pos] {
                b'{' => return self.balanced(),
                b'(' | b'[' => self.balanced()?,
                b';' | b')' | b']' | b'}' => return None,
                _ => self.pos += 1,
            }
        }
        None
    }

    /// One declaration starting at `pos`.
    fn decl(&mut self) -> Option<Role> {
        let mut entry = false;
        let mut other_stage = false;
        loop {
            self.skip_ws();
            if self.pos < self.end && self.code[self.pos] == b'@' {
                self.pos += 1;
                let attr = self.ident()?;
                entry |= attr == "compute";
                other_stage |= matches!(attr, "vertex" | "fragment" | "task" | "mesh");
                self.skip_ws();
                if self.pos < self.end && self.code[self.pos] == b'(' {
                    self.balanced()?;
                }
            } else {
                break;
            }
        }
        let keyword: &'static str = match self.ident()? {
            "fn" => "fn",
            "struct" => "struct",
            "var" => "var",
            "const" => "const",
            "override" => "override",
            "alias" => "alias",
            "const_assert" => "const_assert",
            "enable" => "enable",
            "requires" => "requires",
            "diagnostic" => "diagnostic",
            _ => return None,
        };
        let name = match keyword {
            "fn" | "struct" => {
                let name = self.ident()?.to_string();
                self.past_body()?;
                if keyword == "struct" {
                    let save = self.pos;
                    self.skip_ws();
                    if self.pos < self.end && self.code[self.pos] == b';' {
                        self.pos += 1;
                    } else {
                        self.pos = save;
                    }
                }
                Some(name)
            }
            "var" => {
                self.skip_ws();
                if self.pos < self.end && self.code[self.pos] == b'<' {
                    while self.pos < self.end && self.code[self.pos] != b'>' {
                        self.pos += 1;
                    }
                    self.pos += 1;
                }
                let name = self.ident()?.to_string();
                self.past_semicolon()?;
                Some(name)
            }
            "const" | "override" | "alias" => {
                let name = self.ident()?.to_string();
                self.past_semicolon()?;
                Some(name)
            }
            _ => {
                self.past_semicolon()?;
                None
            }
        };
        Some(match name {
            Some(n) if other_stage && keyword == "fn" => Role::OtherStage(n),
            Some(n) if !entry && !other_stage => Role::Named(keyword, n),
            _ => Role::Always,
        })
    }
}

/// The declarations of `code[range]`, `code` being a file's text with comments masked
/// ([`mask_comments`](crate::split::mask_comments)). Text the scanner does not understand makes
/// the whole range one declaration that is always kept.
pub fn outline(code: &str, range: Range<usize>) -> Outline {
    let mut s = Scanner { code: code.as_bytes(), text: code, pos: range.start, end: range.end };
    let mut decls = Vec::new();
    let mut prev = range.start;
    loop {
        s.skip_ws();
        if s.pos >= s.end {
            break;
        }
        if s.code[s.pos] == b';' {
            s.pos += 1;
            continue;
        }
        let start = s.pos;
        match s.decl() {
            Some(role) => {
                decls.push(Decl { range: prev..s.pos, role, refs: identifiers(&code[start..s.pos]) });
                prev = s.pos;
            }
            None => {
                return Outline {
                    decls: vec![Decl { range: range.clone(), role: Role::Always, refs: identifiers(&code[range]) }],
                };
            }
        }
    }
    if prev < range.end {
        // Comments and blank lines after the last declaration: nothing to reach.
        decls.push(Decl { range: prev..range.end, role: Role::Trailing, refs: Vec::new() });
    }
    Outline { decls }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::split::mask_comments;

    fn names(text: &str) -> Vec<Option<String>> {
        let code = mask_comments(text);
        outline(&code, 0..text.len())
            .decls
            .into_iter()
            .map(|d| match d.role {
                Role::Named(_, n) => Some(n),
                Role::OtherStage(n) => Some(format!("stage {n}")),
                Role::Always => None,
                Role::Trailing => Some(String::new()),
            })
            .collect()
    }

    #[test]
    fn finds_every_kind_of_declaration() {
        let text = "// doc of A\nconst A: u32 = 1u;\nstruct S { a: array<u32, A>, b: vec4<f32> };\n\
                    @group(0) @binding(1) var<storage, read_write> buf: array<S>;\n\
                    var<workgroup> tile: array<f32, 64>;\noverride O: f32 = 1.0;\nalias T = vec2<f32>;\n\
                    const_assert A < 4u;\n/* } */ fn f(x: T) -> f32 { if (x.x > 0.0) { return 1.0; } return O; }\n\
                    @compute @workgroup_size(64) fn main() { _ = f(T()); }\n// trailing\n";
        assert_eq!(
            names(text),
            vec![
                Some("A".into()),
                Some("S".into()),
                Some("buf".into()),
                Some("tile".into()),
                Some("O".into()),
                Some("T".into()),
                None,
                Some("f".into()),
                None,
                Some(String::new()),
            ]
        );
        let code = mask_comments(text);
        let o = outline(&code, 0..text.len());
        assert!(text[o.decls[0].range.clone()].starts_with("// doc of A"), "leading comments go with the declaration");
        assert!(o.decls[7].refs.contains(&"O".to_string()) && o.decls[7].refs.contains(&"T".to_string()));
        // The declarations tile the range.
        assert_eq!(o.decls.first().unwrap().range.start, 0);
        assert_eq!(o.decls.last().unwrap().range.end, text.len());
        for w in o.decls.windows(2) {
            assert_eq!(w[0].range.end, w[1].range.start);
        }
    }

    #[test]
    fn entry_points_of_other_stages_are_marked() {
        let text = "@vertex fn vs(@builtin(vertex_index) i: u32) -> @builtin(position) vec4<f32> { return p(i); }\n\
                    @fragment fn fs() -> @location(0) vec4<f32> { return vec4<f32>(1.0); }\n\
                    @compute @workgroup_size(1) fn main() {}\n";
        assert_eq!(names(text), vec![Some("stage vs".into()), Some("stage fs".into()), None, Some(String::new())]);
    }

    #[test]
    fn what_it_does_not_understand_is_kept_whole() {
        for text in ["fn f( {\n", "const A = 1\n", "}\nfn g() {}\n", "let x = 1;\n", "fn f() {} )"] {
            let n = names(text);
            assert_eq!(n, vec![None], "{text:?}");
        }
    }
}

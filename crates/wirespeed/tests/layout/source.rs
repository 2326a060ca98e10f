//! Reading Rust source for the layout rules: the code of each line with comments and literals
//! blanked out, the functions and their lengths, and `libc::` calls. rustfmt's layout is
//! assumed; nothing here is a parser, so each reader has a test of its own below.

/// Each line of `text` with comments, string and character literals blanked out (a string
/// keeps its quotes, with nothing between them), so that braces, `unsafe` and calls are seen
/// only where they are code.
pub fn code_lines(text: &str) -> Vec<String> {
    #[derive(Clone, Copy)]
    enum In {
        Code,
        Block(usize),
        Str,
        Raw(usize),
    }
    let chars: Vec<char> = text.chars().collect();
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut state = In::Code;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            lines.push(std::mem::take(&mut line));
            i += 1;
            continue;
        }
        match state {
            In::Code => {
                let ident_before = i > 0 && (at(i - 1).is_alphanumeric() || at(i - 1) == '_');
                if c == '/' && at(i + 1) == '/' {
                    while i < chars.len() && chars[i] != '\n' {
                        i += 1;
                    }
                    continue;
                } else if c == '/' && at(i + 1) == '*' {
                    state = In::Block(1);
                    i += 2;
                    continue;
                } else if c == '"' {
                    state = In::Str;
                    line.push('"');
                } else if c == 'r'
                    && (at(i + 1) == '"' || at(i + 1) == '#')
                    && (!ident_before || at(i - 1) == 'b')
                {
                    let hashes = chars[i + 1..].iter().take_while(|&&h| h == '#').count();
                    if at(i + 1 + hashes) == '"' {
                        state = In::Raw(hashes);
                        line.push('"');
                        i += 2 + hashes;
                        continue;
                    }
                    line.push(c);
                } else if c == '\'' && at(i + 1) == '\\' {
                    // An escaped character literal: up to its closing quote.
                    let mut k = i + 2;
                    while k < chars.len() && chars[k] != '\'' && chars[k] != '\n' {
                        k += 1;
                    }
                    line.push_str("' '");
                    i = k + 1;
                    continue;
                } else if c == '\'' && at(i + 2) == '\'' && at(i + 1) != '\n' {
                    line.push_str("' '");
                    i += 3;
                    continue;
                } else {
                    line.push(c);
                }
            }
            In::Block(depth) => {
                if c == '*' && at(i + 1) == '/' {
                    state = if depth == 1 {
                        In::Code
                    } else {
                        In::Block(depth - 1)
                    };
                    i += 2;
                    continue;
                } else if c == '/' && at(i + 1) == '*' {
                    state = In::Block(depth + 1);
                    i += 2;
                    continue;
                }
            }
            In::Str => {
                if c == '\\' && at(i + 1) != '\n' {
                    i += 2;
                    continue;
                } else if c == '"' {
                    state = In::Code;
                    line.push('"');
                }
            }
            In::Raw(hashes) => {
                if c == '"' && (1..=hashes).all(|h| at(i + h) == '#') {
                    state = In::Code;
                    line.push('"');
                    i += 1 + hashes;
                    continue;
                }
            }
        }
        i += 1;
    }
    lines.push(line);
    lines
}

/// A function of a file: its first line (1-based), its name and how many lines it spans.
#[derive(Debug, PartialEq)]
pub struct Function {
    pub line: usize,
    pub name: String,
    pub lines: usize,
}

/// The functions with a body in `code` (from [`code_lines`]), nested ones included, outside
/// `#[cfg(test)]` modules.
pub fn functions(code: &[String]) -> Vec<Function> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let t = code[i].trim();
        if t == "#[cfg(test)]" {
            let next = (i + 1..code.len()).find(|&k| !code[k].trim().starts_with("#["));
            if let Some(k) = next
                .filter(|&k| code[k].trim().starts_with("mod ") && code[k].trim().ends_with('{'))
            {
                i = block_end(code, k).map_or(code.len(), |end| end + 1);
                continue;
            }
        }
        if let Some(name) = function_name(t) {
            if let Some(end) = block_end(code, i) {
                out.push(Function {
                    line: i + 1,
                    name,
                    lines: end - i + 1,
                });
            }
        }
        i += 1;
    }
    out
}

/// The name of the function that line `t` (trimmed) declares, if it declares one.
fn function_name(t: &str) -> Option<String> {
    let mut rest = t;
    loop {
        let before = rest;
        for prefix in [
            "pub(crate) ",
            "pub(super) ",
            "pub ",
            "async ",
            "const ",
            "unsafe ",
            "extern \"\" ",
            "default ",
        ] {
            rest = rest.strip_prefix(prefix).unwrap_or(rest);
        }
        if rest.starts_with("pub(in ") {
            rest = rest.split_once(") ").map_or(rest, |(_, r)| r);
        }
        if rest == before {
            break;
        }
    }
    let name: String = rest
        .strip_prefix("fn ")?
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The line where the braced block that starts at or after line `start` closes; None when a
/// `;` outside brackets ends the item first (a declaration without a body).
fn block_end(code: &[String], start: usize) -> Option<usize> {
    let (mut braces, mut brackets, mut opened) = (0i32, 0i32, false);
    for (k, line) in code.iter().enumerate().skip(start) {
        for c in line.chars() {
            match c {
                '{' => {
                    braces += 1;
                    opened = true;
                }
                '}' => braces -= 1,
                '(' | '[' => brackets += 1,
                ')' | ']' => brackets -= 1,
                ';' if !opened && braces == 0 && brackets == 0 => return None,
                _ => {}
            }
            if opened && braces == 0 {
                return Some(k);
            }
        }
    }
    None
}

/// The `libc` function that `line` (from [`code_lines`]) calls, if it calls one: a lower-case
/// name after `libc::` followed by `(`. Types and constants are not calls.
pub fn libc_call(line: &str) -> Option<String> {
    line.match_indices("libc::").find_map(|(at, _)| {
        let rest = &line[at + "libc::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let after = rest[name.len()..].trim_start();
        let lower = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
        (lower && after.starts_with('(')).then_some(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        code_lines(text)
    }

    #[test]
    fn comments_strings_and_chars_are_blanked() {
        let code = lines("let a = \"{ unsafe }\"; // }\nlet b = '{'; /* { */ let c = r#\"}\"#;\nlet l: &'a str = x;");
        assert_eq!(code[0], "let a = \"\"; ");
        assert_eq!(code[1], "let b = ' ';  let c = \"\";");
        assert_eq!(code[2], "let l: &'a str = x;");
    }

    #[test]
    fn a_string_continued_on_the_next_line_stays_a_string() {
        let code = lines("f(\"a { \\\n  b } c\", x);");
        assert_eq!(code, ["f(\"", "\", x);"]);
    }

    #[test]
    fn functions_are_measured_and_test_modules_skipped() {
        let src = "pub(crate) fn one() -> u8 { 1 }\nfn two(x: [u8; 4]) {\n    let s = \"}\";\n}\nfn decl();\n#[cfg(test)]\nmod tests {\n    fn hidden() {\n    }\n}\nasync fn three() {\n}\n";
        let found = functions(&lines(src));
        let got: Vec<(&str, usize, usize)> = found
            .iter()
            .map(|f| (f.name.as_str(), f.line, f.lines))
            .collect();
        assert_eq!(got, [("one", 1, 1), ("two", 2, 3), ("three", 11, 2)]);
    }

    #[test]
    fn libc_calls_are_told_from_types_and_constants() {
        assert_eq!(
            libc_call("let r = unsafe { libc::recv(fd, p, n, 0) };").as_deref(),
            Some("recv")
        );
        assert_eq!(libc_call("libc::sendto ("), Some("sendto".into()));
        assert_eq!(libc_call("let t: libc::c_int = libc::AF_INET;"), None);
        assert_eq!(libc_call("libc::CMSG_DATA(c)"), None);
        assert_eq!(libc_call("&mut ss as *mut _ as *mut libc::sockaddr"), None);
    }
}

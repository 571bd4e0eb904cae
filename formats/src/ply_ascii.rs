//! One rule for both PLY readers (splats and meshes): an ASCII PLY whose body spells a value
//! `nan`, `inf` or `-inf`, or something that is not a number at all (`1.#QNAN`, MSVC's old NaN;
//! a truncated `1.0e`), is refused naming the element, row, property and token, as a binary file
//! holding a non-finite value is, not with the PLY parser's dump of the line (issue 44 re-trials
//! F3 and N1: the parser printed the line twice and named neither).
//!
//! [`bad_token`] is called only after the parser has failed, so well-formed files pay nothing.

/// A value of an ASCII PLY body that is not a finite number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BadToken {
    /// `vertex[5].filter_3D`: element, row (0-based within the element) and property.
    pub field: String,
    /// The token as written (`nan`, `-inf`, `1.#QNAN`, `1.0e`, …).
    pub token: String,
    /// Whether it is a number at all (`nan`, `inf`: yes; `1.#QNAN`: no).
    pub is_number: bool,
}

impl BadToken {
    /// What the reader expected, for its error message.
    #[must_use]
    pub fn expected(&self) -> &'static str {
        if self.is_number {
            "finite values (remove or re-export the element)"
        } else {
            "a number (the PLY body holds text that is not one; re-export the file)"
        }
    }
}

/// The first value of an ASCII PLY (the whole file, read line by line from `file`) that reads
/// as NaN or ±Inf or not as a number, in elements without list properties (a list's length decides where its
/// row's next property starts, and lists are integer indices, which cannot be spelled `nan`).
/// `None` for binary files, malformed headers, unreadable text and bodies without such a token.
pub(crate) fn bad_token(file: impl std::io::BufRead) -> Option<BadToken> {
    let mut lines = file.lines().map_while(Result::ok);
    if lines.next()?.trim() != "ply" {
        return None;
    }
    // (name, count, property names, has a list property)
    let mut elements: Vec<(String, usize, Vec<String>, bool)> = Vec::new();
    let mut ascii = false;
    for line in lines.by_ref() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["format", format, ..] => ascii = *format == "ascii",
            ["element", name, count] => {
                elements.push((name.to_string(), count.parse().ok()?, Vec::new(), false));
            }
            ["property", "list", .., name] => {
                let element = elements.last_mut()?;
                element.2.push(name.to_string());
                element.3 = true;
            }
            ["property", _, name] => elements.last_mut()?.2.push(name.to_string()),
            ["end_header"] => break,
            _ => {}
        }
    }
    if !ascii {
        return None;
    }
    let mut rows = lines.filter(|l| !l.trim().is_empty());
    for (name, count, properties, has_list) in &elements {
        for row in 0..*count {
            let line = rows.next()?;
            if *has_list {
                // Where a list ends depends on its length: name the row (and the property when
                // it is the element's only one, as `face … vertex_indices` is).
                if let Some(bad) = line.split_whitespace().find_map(|t| checked(t).err()) {
                    let field = match properties.as_slice() {
                        [only] => format!("{name}[{row}].{only}"),
                        _ => format!("{name}[{row}]"),
                    };
                    return Some(BadToken { field, ..bad });
                }
                continue;
            }
            for (token, property) in line.split_whitespace().zip(properties) {
                if let Err(bad) = checked(token) {
                    let field = format!("{name}[{row}].{property}");
                    return Some(BadToken { field, ..bad });
                }
            }
        }
    }
    None
}

/// `Ok` for a token that reads as a finite number; else the [`BadToken`] without its field.
fn checked(token: &str) -> Result<(), BadToken> {
    let value = token.parse::<f64>();
    if value.as_ref().is_ok_and(|v| v.is_finite()) {
        return Ok(());
    }
    Err(BadToken {
        field: String::new(),
        token: token.to_string(),
        is_number: value.is_ok(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over generated files: each spelling of a non-finite value or a non-number, placed in a
    /// random row and property of the second element (after a list element), is found there; a
    /// file of finite values and a binary file give nothing.
    #[test]
    fn every_spelling_of_a_non_finite_value_is_found_where_it_is() {
        let spellings = [
            "nan", "NaN", "inf", "-inf", "+inf", "Infinity", "-INF", "1.#QNAN", "1.0e", "--1", "x",
        ];
        let mut state = 17u64;
        let mut next = |n: usize| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (state >> 33) as usize % n
        };
        for case in 0..40 {
            let rows = 1 + next(20);
            let (bad_row, bad_col) = (next(rows), next(4));
            let spelling = spellings[case % spellings.len()];
            let mut text = format!(
                "ply\nformat ascii 1.0\nelement face 2\nproperty list uchar int vertex_indices\n\
                 element vertex {rows}\nproperty float x\nproperty float y\nproperty float z\n\
                 property float filter_3D\nend_header\n3 0 1 2\n4 0 1 2 3\n"
            );
            for r in 0..rows {
                let values: Vec<String> = (0..4)
                    .map(|c| match (r, c) == (bad_row, bad_col) {
                        true => spelling.to_string(),
                        false => format!("{}.5", r + c),
                    })
                    .collect();
                text.push_str(&values.join(" "));
                text.push('\n');
            }
            let property = ["x", "y", "z", "filter_3D"][bad_col];
            assert_eq!(
                bad_token(text.as_bytes()),
                Some(BadToken {
                    field: format!("vertex[{bad_row}].{property}"),
                    token: spelling.into(),
                    is_number: case % spellings.len() < 7,
                }),
                "{text}"
            );
            let body_at = text.find("end_header\n").unwrap();
            let fine = format!(
                "{}{}",
                &text[..body_at],
                text[body_at..].replace(spelling, "1e30")
            );
            assert_eq!(bad_token(fine.as_bytes()), None);
            let binary = text.replace("format ascii", "format binary_little_endian");
            assert_eq!(bad_token(binary.as_bytes()), None);
            // The same token in the list element's second row names that row and its list.
            let in_face = fine.replace("4 0 1 2 3", &format!("4 0 {spelling} 2 3"));
            assert_eq!(
                bad_token(in_face.as_bytes()).map(|b| b.field),
                Some("face[1].vertex_indices".to_string())
            );
        }
    }
}

//! One rule for both PLY readers (splats and meshes): an ASCII PLY whose body spells a value
//! `nan`, `inf` or `-inf` is refused naming the element, row and property, as a binary file
//! holding the same value is, not with the PLY parser's dump of the line (issue 44 re-trial F3:
//! the parser, which has no grammar for those tokens, printed the line twice and named neither).
//!
//! [`non_finite_token`] is called only after the parser has failed, so well-formed files pay
//! nothing.

/// A non-finite value spelled in an ASCII PLY body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NonFiniteToken {
    /// `vertex[5].filter_3D`: element, row (0-based within the element) and property.
    pub field: String,
    /// The token as written (`nan`, `-inf`, `Infinity`, …).
    pub token: String,
}

/// The first value of an ASCII PLY (the whole file, read line by line from `file`) that reads
/// as NaN or ±Inf, in elements without list properties (a list's length decides where its
/// row's next property starts, and lists are integer indices, which cannot be spelled `nan`).
/// `None` for binary files, malformed headers, unreadable text and bodies without such a token.
pub(crate) fn non_finite_token(file: impl std::io::BufRead) -> Option<NonFiniteToken> {
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
            ["property", "list", ..] => elements.last_mut()?.3 = true,
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
                continue;
            }
            for (token, property) in line.split_whitespace().zip(properties) {
                if token.parse::<f64>().is_ok_and(|v| !v.is_finite()) {
                    return Some(NonFiniteToken {
                        field: format!("{name}[{row}].{property}"),
                        token: token.to_string(),
                    });
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over generated files: each spelling of a non-finite value, placed in a random row and
    /// property of the second element (after a list element), is found there; a file of finite
    /// values and a binary file give nothing.
    #[test]
    fn every_spelling_of_a_non_finite_value_is_found_where_it_is() {
        let spellings = ["nan", "NaN", "inf", "-inf", "+inf", "Infinity", "-INF"];
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
                non_finite_token(text.as_bytes()),
                Some(NonFiniteToken {
                    field: format!("vertex[{bad_row}].{property}"),
                    token: spelling.into(),
                }),
                "{text}"
            );
            let fine = text.replace(spelling, "1e30");
            assert_eq!(non_finite_token(fine.as_bytes()), None);
            let binary = text.replace("format ascii", "format binary_little_endian");
            assert_eq!(non_finite_token(binary.as_bytes()), None);
        }
    }
}

//! Conditions checked before they ever run.
//!
//! `expr-lang` evaluates a condition by walking its syntax tree with no budget: `0..20000000` builds a list of
//! twenty million values, `len(0..1000000000000)` aborts the process, deep nesting recurses without bound, and
//! its parse errors name grammar rules (`expected conditional_if, negation_op, …`). Its syntax tree is private,
//! so this module parses the condition a second time with the very same grammar (`expr.pest`, copied from the
//! crate) and walks that tree to enforce what can be decided before running:
//!
//! - at most [`MAX_LENGTH`] characters and [`MAX_NESTING`] levels of brackets, ternaries and `if`s (checked on
//!   the text, before any parser recurses), and a process-wide parser call limit ([`PARSE_CALL_LIMIT`], which also
//!   stops the grammar's exponential backtracking on inputs like `a[a[a[…`);
//! - ranges (`a..b`) only with integer literal bounds, at most [`MAX_RANGE_ELEMENTS`] elements in all, and never
//!   inside a predicate (where they would be built once per element);
//! - no `let` statements and no `reduce` (the two ways to double a value over and over without looking
//!   anything up, see [`crate::conditions::budget`]);
//! - only known names: `result` (and `$env`), the language's built-in functions and the ones this operator adds;
//!   inside a predicate `#`, `#index` and the fields of `#`;
//! - syntax errors as a sentence with the position (`at column 16: expected a value, a name or "("`).
//!
//! What cannot be decided here (work and memory that depend on the measured value) is bounded while running, see
//! [`crate::conditions::budget`].

use std::num::NonZeroUsize;
use std::sync::Once;

use pest::Parser as _;
use pest::error::{ErrorVariant, InputLocation};
use pest::iterators::Pair;

/// pest generates a public `Rule` enum beside the parser; in a private module it stays out of the crate's API.
mod grammar {
    #[derive(pest_derive::Parser)]
    #[grammar = "conditions/expr.pest"]
    pub(super) struct Grammar;
}
use grammar::{Grammar, Rule};

/// Longest condition accepted, in characters.
pub const MAX_LENGTH: usize = 1024;
/// Deepest nesting of `(`, `[`, `{` plus ternaries and `if`s.
pub const MAX_NESTING: usize = 24;
/// Elements of all ranges of one condition together.
pub const MAX_RANGE_ELEMENTS: i128 = 10_000;
/// pest calls allowed per parse (process-wide: it bounds every pest grammar in the process, JSONPath included).
pub const PARSE_CALL_LIMIT: usize = 2_000_000;

/// Names a condition may call: the functions [`crate::conditions::evaluate`] adds, the built-ins that take a
/// predicate and expr-lang's other built-ins.
pub const FUNCTIONS: &[&str] =
    &concat::<{ ADDED_FUNCTIONS.len() + PREDICATE_FUNCTIONS.len() + OTHER_FUNCTIONS.len() }>(&[
        ADDED_FUNCTIONS,
        PREDICATE_FUNCTIONS,
        OTHER_FUNCTIONS,
    ]);

/// The functions this operator adds (Argo's helpers).
const ADDED_FUNCTIONS: &[&str] = &["asInt", "asFloat", "isNaN", "isInf", "isNil", "default"];

/// Built-ins that take a predicate (`{# > 1}`), as expr-lang's parser decides. Listed once, here: each is callable
/// too, so [`FUNCTIONS`] is made of this list and the others. (`reduce` takes one as well, but a condition never
/// calls it: it is refused by name before its arguments are walked.)
const PREDICATE_FUNCTIONS: &[&str] = &[
    "all",
    "any",
    "one",
    "none",
    "map",
    "filter",
    "find",
    "findIndex",
    "findLast",
    "findLastIndex",
    "count",
    "sum",
    "groupBy",
    "sortBy",
];

/// expr-lang's built-ins that take no predicate.
const OTHER_FUNCTIONS: &[&str] = &[
    "max",
    "min",
    "abs",
    "ceil",
    "floor",
    "round",
    "mean",
    "median",
    "sort",
    "now",
    "duration",
    "timezone",
    "date",
    "type",
    "get",
    "toBase64",
    "fromBase64",
    "toPairs",
    "fromPairs",
    "join",
    "first",
    "last",
    "take",
    "reverse",
    "uniq",
    "concat",
    "flatten",
    "fromJSON",
    "toJSON",
    "keys",
    "values",
    "len",
    "trim",
    "trimPrefix",
    "trimSuffix",
    "upper",
    "lower",
    "split",
    "splitAfter",
    "replace",
    "repeat",
    "indexOf",
    "lastIndexOf",
    "hasPrefix",
    "hasSuffix",
    "bitand",
    "bitor",
    "bitxor",
    "bitnand",
    "bitnot",
    "bitshl",
    "bitshr",
    "bitushr",
    "int",
    "float",
    "string",
];

/// `lists` one after the other, in one array of `N` names (`N`: their total length), at compile time.
const fn concat<const N: usize>(lists: &[&[&'static str]]) -> [&'static str; N] {
    let mut names = [""; N];
    let (mut at, mut list) = (0, 0);
    while list < lists.len() {
        let mut i = 0;
        while i < lists[list].len() {
            names[at] = lists[list][i];
            (at, i) = (at + 1, i + 1);
        }
        list += 1;
    }
    assert!(at == N, "N is the total length of the lists");
    names
}

/// Variables outside predicates.
pub const VARIABLES: &[&str] = &["result", "$env"];

/// Installs the parser call limit once per process.
pub fn install_parse_limit() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| pest::set_call_limit(NonZeroUsize::new(PARSE_CALL_LIMIT)));
}

/// Checks a condition; the error is a sentence (without the expression itself) with the position.
pub fn check(expression: &str) -> Result<(), String> {
    install_parse_limit();
    let length = expression.chars().count();
    if length > MAX_LENGTH {
        return Err(format!("it is {length} characters long; a condition may have at most {MAX_LENGTH}"));
    }
    nesting(expression)?;
    let pairs = Grammar::parse(Rule::full, expression).map_err(|e| translate(expression, &e))?;
    let mut walk = Walk { text: expression, ranges: 0 };
    for pair in pairs {
        walk.visit(pair, 0)?;
    }
    Ok(())
}

/// Where a byte offset is, in words: `column 7` for one-line conditions, else `line 2, column 3`.
fn position(text: &str, offset: usize) -> String {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
    if text.contains('\n') { format!("line {line}, column {column}") } else { format!("column {column}") }
}

/// The text found at an offset, for "found …".
fn found(text: &str, offset: usize) -> String {
    let rest = text.get(offset..).unwrap_or("");
    let token: String = rest.chars().take_while(|c| !c.is_whitespace()).take(12).collect();
    if token.is_empty() { "the end of the condition".to_string() } else { format!("`{token}`") }
}

/// Bracket depth plus ternaries and `if`s, outside string literals; rejects before a parser recurses.
fn nesting(text: &str) -> Result<(), String> {
    let mut depth = 0usize;
    let mut branches = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for (i, &(offset, c)) in chars.iter().enumerate() {
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' && q != '`' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        match c {
            '\'' | '"' | '`' => quote = Some(c),
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            '?' => {
                let next = chars.get(i + 1).map(|(_, c)| *c);
                let prev = i.checked_sub(1).map(|j| chars[j].1);
                if next != Some('?') && next != Some('.') && prev != Some('?') {
                    branches += 1;
                }
            }
            'i' if text[offset..].starts_with("if")
                && !i.checked_sub(1).is_some_and(|j| chars[j].1.is_alphanumeric() || chars[j].1 == '_')
                && !text[offset + 2..].starts_with(|n: char| n.is_alphanumeric() || n == '_') =>
            {
                branches += 1
            }
            _ => {}
        }
        if depth + branches > MAX_NESTING {
            return Err(format!(
                "it nests too deeply at {}: at most {MAX_NESTING} levels of brackets, `?:` and `if` together",
                position(text, offset)
            ));
        }
    }
    Ok(())
}

fn describe_rule(rule: Rule) -> &'static str {
    use Rule::*;
    match rule {
        EOI => "the end of the condition",
        expr | term | value | int | decimal | string | bytes | string_multiline | bool | nil | ident | func | array
        | map | conditional_if | negation_op | sign_op => "a value, a name or `(`",
        exponent_op | multiplication_op | addition_op | range_op | comparison_op | equal_op | and_op | or_op
        | not_in_op | string_op => "an operator (`==`, `>`, `&&`, `+`, `in`, …)",
        ternary | range_start_op | range_end_op | method_call | opt_membership_op | opt_index_op | membership_op
        | index_op | default_op | pipe => "`.field`, `[index]`, `?` or `|`",
        predicate | block => "`{`",
        stmt => "`let`",
        _ => "more input",
    }
}

/// pest's error, as a sentence with the position instead of grammar-internal rule names.
fn translate(text: &str, error: &pest::error::Error<Rule>) -> String {
    let offset = match error.location {
        InputLocation::Pos(p) => p,
        InputLocation::Span((start, _)) => start,
    };
    let at = position(text, offset);
    match &error.variant {
        ErrorVariant::ParsingError { positives, .. } => {
            let mut wanted: Vec<&str> = Vec::new();
            for rule in positives {
                let words = describe_rule(*rule);
                if !wanted.contains(&words) {
                    wanted.push(words);
                }
            }
            let wanted = match wanted.as_slice() {
                [] => "something else".to_string(),
                [one] => one.to_string(),
                [init @ .., last] => format!("{} or {last}", init.join(", ")),
            };
            format!("syntax error at {at}: expected {wanted}, found {}", found(text, offset))
        }
        ErrorVariant::CustomError { message } if message.contains("limit reached") => {
            format!("it is too complex to parse (the parser gave up at {at}: {message})")
        }
        ErrorVariant::CustomError { message } => format!("syntax error at {at}: {message}"),
    }
}

/// The value of an integer literal as expr-lang reads it (`1_000`, `0x1F`, `0o7`, `0b1`).
fn int_literal(text: &str) -> Option<i128> {
    let clean = text.replace('_', "");
    let (digits, radix) = match clean.get(..2) {
        Some("0x" | "0X") => (&clean[2..], 16),
        Some("0o" | "0O") => (&clean[2..], 8),
        Some("0b" | "0B") => (&clean[2..], 2),
        _ => (clean.as_str(), 10),
    };
    i128::from_str_radix(digits, radix).ok()
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for j in 0..b.len() {
            let current = row[j + 1];
            row[j + 1] = if ca == b[j] { previous } else { 1 + previous.min(row[j]).min(row[j + 1]) };
            previous = current;
        }
    }
    row[b.len()]
}

fn suggestion(name: &str, candidates: &[&str]) -> String {
    candidates
        .iter()
        .map(|c| (edit_distance(&name.to_lowercase(), &c.to_lowercase()), *c))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, c)| format!(" (did you mean `{c}`?)"))
        .unwrap_or_default()
}

struct Walk<'t> {
    text: &'t str,
    ranges: i128,
}

fn is_infix(rule: Rule) -> bool {
    use Rule::*;
    matches!(
        rule,
        exponent_op
            | multiplication_op
            | addition_op
            | range_op
            | comparison_op
            | equal_op
            | and_op
            | or_op
            | not_in_op
            | string_op
    )
}

/// Operators that bind tighter than `..`: next to a range bound they make the bound computed.
fn binds_tighter_than_range(rule: Rule) -> bool {
    matches!(rule, Rule::exponent_op | Rule::multiplication_op | Rule::addition_op | Rule::range_op)
}

impl Walk<'_> {
    fn at(&self, pair: &Pair<'_, Rule>) -> String {
        position(self.text, pair.as_span().start())
    }

    /// `predicate`: how many predicate bodies enclose this pair.
    fn visit(&mut self, pair: Pair<'_, Rule>, predicate: usize) -> Result<(), String> {
        match pair.as_rule() {
            Rule::stmt => {
                return Err(format!(
                    "`let` at {} is not supported in conditions (write the value where it is used)",
                    self.at(&pair)
                ));
            }
            Rule::expr => return self.expr(pair, predicate),
            Rule::func | Rule::method_call => {
                let mut inner = pair.clone().into_inner();
                let Some(name) = inner.next() else { return Ok(()) };
                let ident = name.as_str();
                if ident == "reduce" {
                    return Err(format!(
                        "`reduce` at {} is not supported in conditions (use sum, count, all, any, map or filter)",
                        self.at(&name)
                    ));
                }
                if !FUNCTIONS.contains(&ident) {
                    return Err(format!(
                        "unknown function `{ident}` at {}{}",
                        self.at(&name),
                        suggestion(ident, FUNCTIONS)
                    ));
                }
                let takes_predicate = PREDICATE_FUNCTIONS.contains(&ident);
                for (i, arg) in inner.enumerate() {
                    // expr-lang turns the last argument into the predicate when it mentions `#`
                    // (`filter(result, # > 1)`), so every argument after the first counts as one.
                    let inside = match arg.as_rule() {
                        Rule::predicate => predicate + 1,
                        _ if takes_predicate && i > 0 => predicate + 1,
                        _ => predicate,
                    };
                    self.visit(arg, inside)?;
                }
                return Ok(());
            }
            Rule::pipe => {
                // `result | filter(# > 1)`: every argument of a piped predicate function is a predicate.
                for func in pair.into_inner() {
                    let name = func.clone().into_inner().next().map(|n| n.as_str().to_string()).unwrap_or_default();
                    let inside = if PREDICATE_FUNCTIONS.contains(&name.as_str()) { predicate + 1 } else { predicate };
                    // The function name itself is checked by the `func` arm.
                    self.visit_func_as(func, predicate, inside)?;
                }
                return Ok(());
            }
            Rule::predicate => {
                for child in pair.into_inner() {
                    // `.field` shorthand: a field name, nothing to check.
                    if child.as_rule() != Rule::ident {
                        self.visit(child, predicate)?;
                    }
                }
                return Ok(());
            }
            Rule::membership_op | Rule::opt_membership_op => return Ok(()),
            Rule::map => {
                // Keys (idents or strings) are names, not variables; only values are expressions.
                for child in pair.into_inner() {
                    if child.as_rule() == Rule::expr {
                        self.visit(child, predicate)?;
                    }
                }
                return Ok(());
            }
            _ => {}
        }
        for child in pair.into_inner() {
            self.visit(child, predicate)?;
        }
        Ok(())
    }

    /// A piped function: its name is checked, its arguments are predicates when `inside` says so.
    fn visit_func_as(&mut self, func: Pair<'_, Rule>, predicate: usize, inside: usize) -> Result<(), String> {
        let mut inner = func.into_inner();
        let Some(name) = inner.next() else { return Ok(()) };
        let ident = name.as_str();
        if ident == "reduce" {
            return Err(format!("`reduce` at {} is not supported in conditions", self.at(&name)));
        }
        if !FUNCTIONS.contains(&ident) {
            return Err(format!("unknown function `{ident}` at {}{}", self.at(&name), suggestion(ident, FUNCTIONS)));
        }
        for arg in inner {
            let depth = if arg.as_rule() == Rule::predicate { predicate + 1 } else { inside };
            self.visit(arg, depth)?;
        }
        Ok(())
    }

    /// One `expr`: a flat sequence of prefixes, terms, postfixes and infix operators.
    fn expr(&mut self, pair: Pair<'_, Rule>, predicate: usize) -> Result<(), String> {
        let children: Vec<Pair<'_, Rule>> = pair.into_inner().collect();
        for (i, child) in children.iter().enumerate() {
            match child.as_rule() {
                Rule::ident => self.variable(child, predicate)?,
                Rule::range_op => self.range(&children, i, predicate)?,
                _ => self.visit(child.clone(), predicate)?,
            }
        }
        Ok(())
    }

    fn variable(&self, ident: &Pair<'_, Rule>, predicate: usize) -> Result<(), String> {
        let name = ident.as_str();
        if VARIABLES.contains(&name) {
            return Ok(());
        }
        if name.starts_with('#') {
            return if predicate > 0 {
                Ok(())
            } else {
                Err(format!(
                    "`{name}` at {} is only defined inside a predicate such as all(result, {{# > 0}})",
                    self.at(ident)
                ))
            };
        }
        if predicate > 0 {
            // Inside a predicate a bare name is a field of `#` (`all(result, {ok})`).
            return Ok(());
        }
        if FUNCTIONS.contains(&name) {
            return Err(format!("`{name}` at {} is a function: call it, e.g. {name}(result)", self.at(ident)));
        }
        Err(format!(
            "unknown name `{name}` at {}{}: a condition can use `result` (the measured value) and functions such as \
             asInt(result)",
            self.at(ident),
            suggestion(name, VARIABLES)
        ))
    }

    /// The operand of a range next to index `op` in an expr, as an integer literal, or why not.
    fn bound(&self, children: &[Pair<'_, Rule>], range: std::ops::Range<usize>) -> Option<i128> {
        let operand = &children[range];
        let (sign, rest) = match operand {
            [first, rest @ ..] if first.as_rule() == Rule::sign_op => (first.as_str(), rest),
            _ => ("+", operand),
        };
        let [value] = rest else { return None };
        if value.as_rule() != Rule::value {
            return None;
        }
        let literal = value.clone().into_inner().next()?;
        if literal.as_rule() != Rule::int {
            return None;
        }
        let n = int_literal(literal.as_str())?;
        Some(if sign == "-" { -n } else { n })
    }

    fn range(&mut self, children: &[Pair<'_, Rule>], op: usize, predicate: usize) -> Result<(), String> {
        let at = self.at(&children[op]);
        if predicate > 0 {
            return Err(format!(
                "the range at {at} is inside a predicate, where it would be built once per element; ranges are \
                 allowed only outside predicates"
            ));
        }
        let start = children[..op].iter().rposition(|c| is_infix(c.as_rule())).map_or(0, |p| p + 1);
        let end = children[op + 1..].iter().position(|c| is_infix(c.as_rule())).map_or(children.len(), |p| op + 1 + p);
        let tighter_before = start > 0 && binds_tighter_than_range(children[start - 1].as_rule());
        let tighter_after = end < children.len() && binds_tighter_than_range(children[end].as_rule());
        let (Some(low), Some(high), false, false) =
            (self.bound(children, start..op), self.bound(children, op + 1..end), tighter_before, tighter_after)
        else {
            return Err(format!(
                "the range at {at} needs integer literals as bounds (such as 1..10), so that its size is known \
                 before it is built"
            ));
        };
        let elements = (high - low + 1).max(0);
        self.ranges = self.ranges.saturating_add(elements);
        if self.ranges > MAX_RANGE_ELEMENTS {
            return Err(format!(
                "the range at {at} has {elements} elements; the ranges of a condition may have at most \
                 {MAX_RANGE_ELEMENTS} elements together"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(expression: &str) -> String {
        check(expression).expect_err(expression)
    }

    #[test]
    fn the_compatibility_corpus_passes() {
        for ok in [
            "asInt(result) > 30",
            "result[0] >= 0.95",
            "all(result, {# > 1})",
            "len(filter(result, {# > 1})) == 2",
            "filter(result, # > 1) == []",
            "result | filter(# > 1) | len() > 0",
            "result.status == \"Healthy\"",
            "result in ['ok', 'ready']",
            "result.count > 3 ? true : false",
            "default(result, 0) >= 0",
            "all(result.items, {ok == true})",
            "all(result.items, {any(#.conditions, {#.ok})})",
            "len(1..10) == 10",
            "len(-5..5) == 11",
            "(0..9999)[0] == 0",
            "result[1:3] == [2]",
            "if result > 1 { true } else { false }",
            "$env.result == 1",
            "{a: 1, 'b': result}.a == 1",
            "result?.a ?? 0 == 0",
            "map(result, {#index}) != nil",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
    }

    /// Each condition is refused with a problem that says the text beside it.
    fn assert_refused(cases: &[(&str, &str)]) {
        for (condition, says) in cases {
            let p = problem(condition);
            assert!(p.contains(says), "{condition}: {p}");
        }
    }

    #[test]
    fn ranges_need_small_literal_bounds_outside_predicates() {
        assert_refused(&[
            ("len(0..20000000) > 0", "has 20000001 elements"),
            ("len(0..1000000000000) > 0", "at most 10000 elements"),
            ("len(0..0x7fffffffffffffff) > 0", "elements"),
            ("len(0..6000) + len(0..6000) > 0", "together"),
            ("len(0..asInt(result)) > 0", "integer literals"),
            ("len(1+0..5) > 0", "integer literals"),
            ("len(0..5*1000000) > 0", "integer literals"),
            ("all(result, {len(0..10) > #})", "inside a predicate"),
            ("all(0..9999, {all(0..9999, {# >= 0})})", "inside a predicate"),
            ("all(0..9999, all(0..9999, # >= 0))", "inside a predicate"),
        ]);
    }

    #[test]
    fn let_and_reduce_are_refused() {
        assert_refused(&[
            ("let a = result; a > 1", "`let` at column 1"),
            ("reduce(result, #acc + #acc, 'x') != ''", "`reduce`"),
            ("result | reduce(#acc + #acc) != ''", "`reduce`"),
        ]);
    }

    #[test]
    fn undeclared_names_are_named_with_their_position() {
        let p = problem("asInt(reslt) > 30");
        assert_eq!(
            p,
            "unknown name `reslt` at column 7 (did you mean `result`?): a condition can use `result` (the measured \
             value) and functions such as asInt(result)"
        );
        assert!(problem("asInteger(result) > 1").starts_with("unknown function `asInteger` at column 1"));
        assert_refused(&[
            ("asint(result) > 1", "did you mean `asInt`"),
            ("# > 1", "only defined inside a predicate"),
            ("len > 1", "is a function"),
        ]);
    }

    #[test]
    fn syntax_errors_are_sentences_with_positions() {
        let p = problem("asInt(result) >");
        assert_eq!(p, "syntax error at column 16: expected a value, a name or `(`, found the end of the condition");
        let p = problem("asInt(result) 30");
        assert!(p.starts_with("syntax error at column 15: expected "), "{p}");
        assert!(p.contains("found `30`"), "{p}");
        assert!(!p.contains("conditional_if") && !p.contains("negation_op"), "{p}");
        let p = problem("result ==\n  )");
        assert!(p.contains("line 2, column 3"), "{p}");
    }

    #[test]
    fn nesting_and_length_are_bounded_before_parsing() {
        let deep = format!("{}1{} > 0", "(".repeat(100_000), ")".repeat(100_000));
        assert!(problem(&deep).contains("characters long"));
        let deep = format!("{}1{} > 0", "(".repeat(30), ")".repeat(30));
        assert!(problem(&deep).contains("nests too deeply at column 25"), "{}", problem(&deep));
        let ternaries = "result ? ".repeat(30) + "1" + &" : 0".repeat(30);
        assert!(problem(&ternaries).contains("nests too deeply"));
        let ok = format!("{}1{} > 0", "(".repeat(20), ")".repeat(20));
        assert_eq!(check(&ok), Ok(()));
        // Brackets inside strings do not count.
        assert_eq!(check(&format!("result == '{}'", "(".repeat(200))), Ok(()));
    }

    #[test]
    fn exponential_backtracking_is_cut_by_the_call_limit() {
        let nested = format!("{}1{}", "a[".repeat(22), "]".repeat(22));
        let start = std::time::Instant::now();
        let p = problem(&nested);
        assert!(start.elapsed() < std::time::Duration::from_secs(10), "{:?}", start.elapsed());
        assert!(p.contains("too complex") || p.contains("unknown name"), "{p}");
    }
}

//! [`ChatTemplate`]: a Hugging Face chat template (Jinja) rendered as `transformers`'
//! `apply_chat_template(..., tokenize=False)` renders it, with `minijinja`.

use candle_core::{Error, Result};
use minijinja::value::{Kwargs, Value as JValue};
use minijinja::{Environment, ErrorKind};
use serde::{Deserialize, Serialize};

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, …
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message from `role`.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self { role: role.into(), content: content.into() }
    }

    /// A `system` message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }

    /// A `user` message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }

    /// An `assistant` message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }
}

/// A compiled chat template.
///
/// The environment is the one `transformers` renders with: `trim_blocks` and `lstrip_blocks`
/// on, one trailing newline of the template dropped, loop controls (`break` / `continue`), the
/// Python string and dict methods templates call (`strip`, `split`, `startswith`, `items`, …,
/// from `minijinja-contrib`'s pycompat), `tojson` as Python's `json.dumps(ensure_ascii=False)`
/// writes it (no HTML escaping; `indent`, `sort_keys`), `raise_exception(message)` (an error
/// naming the message) and `strftime_now(format)` (UTC). The context: `messages`,
/// `add_generation_prompt`, `bos_token`, `eos_token`, plus any extra variables given to
/// [`ChatTemplate::render_with`].
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("bos_token", &self.bos_token).field("eos_token", &self.eos_token).finish()
    }
}

const NAME: &str = "chat_template";

fn template_err(what: &str, e: minijinja::Error) -> Error {
    let mut msg = format!("chat template: {what}: {e}");
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg.push_str(&format!(": {s}"));
        src = s.source();
    }
    Error::Msg(msg)
}

impl ChatTemplate {
    /// Compiles `source` (an error naming the problem when it does not parse).
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| template_err("syntax", e))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(NAME, source.to_string()).map_err(|e| template_err("cannot compile", e))?;
        Ok(Self { env, bos_token: bos_token.to_string(), eos_token: eos_token.to_string() })
    }

    /// Renders `messages`, ending with the assistant prompt when `add_generation_prompt`.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_with(messages, add_generation_prompt, &serde_json::Value::Null)
    }

    /// [`ChatTemplate::render`] with extra context variables (a JSON object, e.g.
    /// `{"enable_thinking": false}` or `{"tools": [...]}`; `null` for none).
    pub fn render_with(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        extra: &serde_json::Value,
    ) -> Result<String> {
        let mut ctx = match extra {
            serde_json::Value::Object(o) => o.clone(),
            serde_json::Value::Null => serde_json::Map::new(),
            v => return Err(Error::Msg(format!("chat template: extra context must be a JSON object, got {v}"))),
        };
        ctx.insert("messages".into(), serde_json::to_value(messages).map_err(|e| Error::Msg(e.to_string()))?);
        ctx.insert("add_generation_prompt".into(), add_generation_prompt.into());
        ctx.insert("bos_token".into(), self.bos_token.clone().into());
        ctx.insert("eos_token".into(), self.eos_token.clone().into());
        let tmpl = self.env.get_template(NAME).map_err(|e| template_err("cannot load", e))?;
        tmpl.render(JValue::from(minijinja::value::Serde(&ctx))).map_err(|e| template_err("cannot render", e))
    }
}

fn raise_exception(msg: String) -> std::result::Result<JValue, minijinja::Error> {
    Err(minijinja::Error::new(ErrorKind::InvalidOperation, format!("raise_exception: {msg}")))
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=indent, sort_keys=sort_keys)`: keys
/// in insertion order, `", "` / `": "` separators (`","` between items with an indent), no HTML
/// escaping.
fn tojson(value: JValue, indent: Option<JValue>, kwargs: Kwargs) -> std::result::Result<JValue, minijinja::Error> {
    let indent = match indent.or(kwargs.get::<Option<JValue>>("indent")?) {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(usize::try_from(v)?),
    };
    let sort_keys: bool = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    // Accepted with the value transformers uses.
    let _ = kwargs.get::<Option<JValue>>("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_py_json(&value, indent, sort_keys, 0, &mut out)?;
    Ok(JValue::from_safe_string(out))
}

fn write_py_json(
    v: &JValue,
    indent: Option<usize>,
    sort_keys: bool,
    depth: usize,
    out: &mut String,
) -> std::result::Result<(), minijinja::Error> {
    use minijinja::value::ValueKind;
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * depth));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    let json_str = |s: &str| serde_json::to_string(s).unwrap_or_default();
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::String => out.push_str(&json_str(v.as_str().unwrap_or_default())),
        ValueKind::Number => {
            if v.is_integer() {
                out.push_str(&v.to_string());
            } else {
                let f = f64::try_from(v.clone())?;
                if !f.is_finite() {
                    out.push_str(if f.is_nan() {
                        "NaN"
                    } else if f > 0.0 {
                        "Infinity"
                    } else {
                        "-Infinity"
                    });
                } else {
                    // Python writes floats with a fractional part or an exponent (1.0, 1e-05).
                    let s = serde_json::Number::from_f64(f).map(|n| n.to_string()).unwrap_or_default();
                    out.push_str(&s);
                    if !s.contains(['.', 'e', 'E']) {
                        out.push_str(".0");
                    }
                }
            }
        }
        ValueKind::Map => {
            let mut keys: Vec<JValue> = v.try_iter()?.collect();
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            if sort_keys {
                keys.sort();
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                match k.as_str() {
                    Some(s) => out.push_str(&json_str(s)),
                    None => out.push_str(&json_str(&k.to_string())),
                }
                out.push_str(": ");
                write_py_json(&v.get_item(k)?, indent, sort_keys, depth + 1, out)?;
            }
            newline(out, depth);
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<JValue> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, depth + 1);
                write_py_json(x, indent, sort_keys, depth + 1, out)?;
            }
            newline(out, depth);
            out.push(']');
        }
        _ => out.push_str(&json_str(&v.to_string())),
    }
    Ok(())
}

/// `strftime_now(format)`: the current UTC time with the common `strftime` codes
/// (`%Y %y %m %d %e %B %b %A %a %H %M %S %j %p %I %%`).
fn strftime_now(format: String) -> String {
    let secs =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0);
    strftime_utc(secs, &format)
}

fn strftime_utc(secs: i64, format: &str) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (h, mi, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let weekday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum[(m - 1) as usize] + d + i64::from(leap && m > 2);
    let mut out = String::new();
    let mut it = format.chars();
    while let Some(c) = it.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('e') => out.push_str(&format!("{d:>2}")),
            Some('B') => out.push_str(MONTHS[(m - 1) as usize]),
            Some('b') | Some('h') => out.push_str(&MONTHS[(m - 1) as usize][..3]),
            Some('A') => out.push_str(DAYS[weekday]),
            Some('a') => out.push_str(&DAYS[weekday][..3]),
            Some('H') => out.push_str(&format!("{h:02}")),
            Some('I') => out.push_str(&format!("{:02}", if h % 12 == 0 { 12 } else { h % 12 })),
            Some('p') => out.push_str(if h < 12 { "AM" } else { "PM" }),
            Some('M') => out.push_str(&format!("{mi:02}")),
            Some('S') => out.push_str(&format!("{s:02}")),
            Some('j') => out.push_str(&format!("{yday:03}")),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_known_dates() {
        // 2024-07-26 12:34:56 UTC, a Friday.
        assert_eq!(strftime_utc(1_721_997_296, "%d %b %Y %H:%M:%S %A %j"), "26 Jul 2024 12:34:56 Friday 208");
        assert_eq!(strftime_utc(0, "%Y-%m-%d %a"), "1970-01-01 Thu");
    }

    #[test]
    fn python_string_methods_loop_controls_and_tojson() {
        let src = "{% for m in messages %}{% if m.role == 'skip' %}{% continue %}{% endif %}\
                   {{ m.content.strip().upper() }}|{% endfor %}{{ {'a': [1, 2.0, 'é<'], 'b': none} | tojson }}";
        let t = ChatTemplate::new(src, "", "").unwrap();
        let out =
            t.render(&[Message::user("  hi "), Message::new("skip", "x"), Message::assistant("yo")], false).unwrap();
        assert_eq!(out, "HI|YO|{\"a\": [1, 2.0, \"é<\"], \"b\": null}");
        let e = ChatTemplate::new("{{ raise_exception('no system role') }}", "", "")
            .unwrap()
            .render(&[], true)
            .unwrap_err();
        assert!(e.to_string().contains("no system role"), "{e}");
    }
}

//! Tokens, cost and outcome of a call: the one reader every surface uses
//! (the proxy's and the harness's records, the web view, `convo log`,
//! `convo turn`, `convo session get`).
//!
//! - [`raw`]: the usage object of a response body, as the vendor wrote it
//!   (what a record keeps in its `usage` diagnostics);
//! - [`Usage::of`]: that object read whatever the vendor's names: OpenAI
//!   chat (`prompt_tokens`, `completion_tokens`, cached in
//!   `prompt_tokens_details`), the Responses API (`input_tokens`,
//!   `output_tokens`, cached in `input_tokens_details`), Anthropic
//!   (`input_tokens` leaves out `cache_read_input_tokens` and
//!   `cache_creation_input_tokens`: they are added), Gemini
//!   (`promptTokenCount`, `candidatesTokenCount`,
//!   `cachedContentTokenCount`, and the CLI's `input`/`output`/`cached`);
//! - [`Call::of`]: what a response node's diagnostics say about its call
//!   (model, usage, cost, latency, status, failure, a cut stream);
//! - [`prices`]: a vendored subset of LiteLLM's price table
//!   (`assets/prices.json`), or the file `CONVO_PRICES` names.

use crate::api::Api;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::OnceLock;

const PRICES_JSON: &str = include_str!("../assets/prices.json");

/// The usage object of a (non-streamed or assembled) response body, as
/// the vendor wrote it; `None` when it has none.
pub fn raw(api: Api, resp: Option<&Value>) -> Option<Value> {
    let r = resp?;
    let u = match api {
        Api::Responses => r.get("usage").or_else(|| r.get("response")?.get("usage")),
        _ => r.get("usage").or_else(|| r.get("usageMetadata")),
    }?;
    (!u.is_null()).then(|| u.clone())
}

/// Token counts of one call, whatever the vendor's names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// All input tokens (cached ones included).
    pub input: u64,
    /// Output tokens (reasoning included).
    pub output: u64,
    /// Input tokens read from a prompt cache.
    pub cached: u64,
    /// Input tokens written to a prompt cache (Anthropic).
    pub cache_write: u64,
}

impl Usage {
    /// Reads a usage object (see the module docs for the vendors); `None`
    /// when it is not an object naming tokens.
    pub fn of(u: &Value) -> Option<Usage> {
        let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
        let o = u.as_object()?;
        let has = |ks: &[&str]| ks.iter().any(|k| o.contains_key(*k));
        if has(&["prompt_tokens", "completion_tokens"]) {
            return Some(Usage {
                input: n(o.get("prompt_tokens")),
                output: n(o.get("completion_tokens")),
                cached: n(u.pointer("/prompt_tokens_details/cached_tokens")),
                cache_write: 0,
            });
        }
        if has(&["cache_read_input_tokens", "cache_creation_input_tokens"]) {
            // Anthropic: input_tokens leaves the cached ones out.
            let (r, w) = (
                n(o.get("cache_read_input_tokens")),
                n(o.get("cache_creation_input_tokens")),
            );
            return Some(Usage {
                input: n(o.get("input_tokens")) + r + w,
                output: n(o.get("output_tokens")),
                cached: r,
                cache_write: w,
            });
        }
        if has(&["input_tokens", "output_tokens"]) {
            return Some(Usage {
                input: n(o.get("input_tokens")),
                output: n(o.get("output_tokens")),
                cached: n(u.pointer("/input_tokens_details/cached_tokens")),
                cache_write: 0,
            });
        }
        if has(&["promptTokenCount", "candidatesTokenCount"]) {
            return Some(Usage {
                input: n(o.get("promptTokenCount")),
                output: n(o.get("candidatesTokenCount")) + n(o.get("thoughtsTokenCount")),
                cached: n(o.get("cachedContentTokenCount")),
                cache_write: 0,
            });
        }
        // Gemini CLI's `tokens`, and convo's own `{"in", "out"}`.
        has(&["input", "output", "in", "out"]).then(|| Usage {
            input: n(o.get("input").or_else(|| o.get("in"))),
            output: n(o.get("output").or_else(|| o.get("out"))) + n(o.get("thoughts")),
            cached: n(o.get("cached")),
            cache_write: 0,
        })
    }

    /// What these tokens cost at `p`, in USD: cached and cache-written
    /// input at their own prices when the table has them.
    pub fn cost(&self, p: &Price) -> f64 {
        let fresh = self.input.saturating_sub(self.cached + self.cache_write);
        fresh as f64 * p.input_cost_per_token
            + self.cached as f64
                * p.cache_read_input_token_cost
                    .unwrap_or(p.input_cost_per_token)
            + self.cache_write as f64
                * p.cache_creation_input_token_cost
                    .unwrap_or(p.input_cost_per_token)
            + self.output as f64 * p.output_cost_per_token
    }
}

/// USD per token for one model.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
pub struct Price {
    /// Each input token.
    #[serde(default)]
    pub input_cost_per_token: f64,
    /// Each output token.
    #[serde(default)]
    pub output_cost_per_token: f64,
    /// Each input token read from a cache (else the input price).
    pub cache_read_input_token_cost: Option<f64>,
    /// Each input token written to a cache (else the input price).
    pub cache_creation_input_token_cost: Option<f64>,
}

/// A price table: model name → price.
#[derive(Debug, Default)]
pub struct Prices {
    /// Where the table comes from (and its date).
    pub source: String,
    models: HashMap<String, Price>,
}

impl Prices {
    /// Parses convo's table (`{"source", "date", "models": {…}}`) or a
    /// whole LiteLLM `model_prices_and_context_window.json`.
    pub fn parse(text: &str, origin: &str) -> Result<Prices, String> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| format!("price table {origin}: {e}"))?;
        let Some(top) = v.as_object() else {
            return Err(format!("price table {origin}: not a JSON object"));
        };
        let (map, source) = match top.get("models").and_then(Value::as_object) {
            Some(m) => (
                m,
                format!(
                    "{} ({})",
                    top.get("source").and_then(Value::as_str).unwrap_or(origin),
                    top.get("date").and_then(Value::as_str).unwrap_or("undated")
                ),
            ),
            None => (top, origin.to_owned()),
        };
        let models = map
            .iter()
            .filter_map(|(k, v)| {
                let p: Price = serde_json::from_value(v.clone()).ok()?;
                v.get("input_cost_per_token")?;
                Some((k.clone(), p))
            })
            .collect();
        Ok(Prices { source, models })
    }

    /// The price of `model`: by its name, its name without a provider
    /// prefix (`anthropic/…`), or the longest known name it starts with
    /// (a dated or suffixed name, `gpt-4o-2099-01-01`).
    pub fn find(&self, model: &str) -> Option<Price> {
        if let Some(p) = self.models.get(model) {
            return Some(*p);
        }
        let bare = model.rsplit('/').next().unwrap_or(model);
        if let Some(p) = self.models.get(bare) {
            return Some(*p);
        }
        self.models
            .iter()
            .filter(|(k, _)| bare.starts_with(k.as_str()))
            .max_by_key(|(k, _)| k.len())
            .map(|(_, p)| *p)
    }
}

static PRICES: OnceLock<Result<Prices, String>> = OnceLock::new();

/// The price table: the file `CONVO_PRICES` names when set, else the
/// embedded one. Read once.
pub fn prices() -> Result<&'static Prices, &'static str> {
    PRICES
        .get_or_init(|| match std::env::var_os("CONVO_PRICES") {
            Some(f) => {
                let origin = std::path::Path::new(&f).display().to_string();
                std::fs::read_to_string(&f)
                    .map_err(|e| format!("price table {origin}: {e}"))
                    .and_then(|t| Prices::parse(&t, &origin))
            }
            None => Prices::parse(PRICES_JSON, "assets/prices.json"),
        })
        .as_ref()
        .map_err(String::as_str)
}

/// What a response node says about its call.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Call {
    /// The model that answered.
    pub model: Option<String>,
    /// Its tokens.
    pub usage: Option<Usage>,
    /// USD; `None` when the model is not in the price table.
    pub cost: Option<f64>,
    /// Request sent → last byte, ms.
    pub latency_ms: Option<f64>,
    /// Request sent → first byte, ms.
    pub ttft_ms: Option<f64>,
    /// The HTTP status.
    pub status: Option<u64>,
    /// The call failed (a status of 400 or more, or an error).
    pub failed: bool,
    /// Why the upstream's stream ended early (the proxy's `partial`).
    pub cut: Option<String>,
}

impl Call {
    /// From a response's diagnostics (as the proxy and the importers
    /// record them: `usage`, `tokens`, `assembled.usage`, `extra.usage`)
    /// and, when they lack model or usage, its parsed body.
    pub fn of(diag: &Value, body: Option<&Value>) -> Call {
        let get = |k: &str| diag.get(k).filter(|v| !v.is_null());
        let model = get("model")
            .and_then(Value::as_str)
            .or_else(|| body?.get("model")?.as_str())
            .map(str::to_owned);
        let usage = get("usage")
            .or_else(|| get("tokens"))
            .or_else(|| get("assembled")?.get("usage"))
            .or_else(|| get("extra")?.get("usage"))
            .and_then(Usage::of)
            .or_else(|| {
                let b = body?;
                let u = b.get("usage").or_else(|| b.get("response")?.get("usage"));
                u.or_else(|| b.get("usageMetadata")).and_then(Usage::of)
            });
        let status = get("status").and_then(Value::as_u64);
        let failed = status.is_some_and(|s| s >= 400)
            || get("error").is_some()
            || body.is_some_and(|b| b.get("error").is_some_and(|e| !e.is_null()));
        let cost = match (&model, usage, prices()) {
            (Some(m), Some(u), Ok(p)) => p.find(m).map(|pr| u.cost(&pr)),
            _ => None,
        };
        let cut = get("partial").map(|p| match p {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
        Call {
            cut,
            model,
            usage,
            cost,
            latency_ms: get("latency_ms").and_then(Value::as_f64),
            ttft_ms: get("ttft_ms").and_then(Value::as_f64),
            status,
            failed,
        }
    }

    /// Whether anything here is about an LLM call.
    pub fn is_call(&self) -> bool {
        self.model.is_some() || self.usage.is_some() || self.status.is_some()
    }
}

/// USD as people read it: `$0`, `$0.000012`, `$0.0042`, `$1.25`.
pub fn usd(x: f64) -> String {
    if x == 0.0 {
        "$0".into()
    } else if x < 0.0001 {
        format!("${x:.6}")
    } else if x < 0.01 {
        format!("${x:.4}")
    } else {
        format!("${x:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::assemble;
    use serde_json::json;

    /// The tokens a recorded response holds, read as the proxy records
    /// them (`raw` of the body or of the assembled stream) and as every
    /// surface shows them (`Call::of` its diagnostics).
    fn read(api: Api, body: &str, streamed: bool) -> Usage {
        let v = if streamed {
            assemble(api, body.as_bytes()).expect("assembles")
        } else {
            serde_json::from_str(body).expect("JSON")
        };
        let u = raw(api, Some(&v)).expect("usage recorded");
        let from_diag = Call::of(&json!({"usage": u, "status": 200}), None);
        let from_body = Call::of(&json!({"status": 200}), Some(&v));
        assert_eq!(from_diag.usage, from_body.usage);
        from_diag.usage.expect("usage read")
    }

    #[test]
    fn usage_of_each_vendor_streamed_and_not() {
        let chat = r#"{"model":"gpt-4o","choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":100,"total_tokens":1100,"prompt_tokens_details":{"cached_tokens":400}}}"#;
        let want = Usage {
            input: 1000,
            output: 100,
            cached: 400,
            cache_write: 0,
        };
        assert_eq!(read(Api::Chat, chat, false), want);
        let chat_sse = concat!(
            "data: {\"id\":\"c\",\"model\":\"gpt-4o\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
            "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":100,\"prompt_tokens_details\":{\"cached_tokens\":400}}}\n\n",
            "data: [DONE]\n\n"
        );
        assert_eq!(read(Api::Chat, chat_sse, true), want);

        let responses = r#"{"object":"response","model":"gpt-4o","output":[],"usage":{"input_tokens":50,"output_tokens":7,"input_tokens_details":{"cached_tokens":10}}}"#;
        let want = Usage {
            input: 50,
            output: 7,
            cached: 10,
            cache_write: 0,
        };
        assert_eq!(read(Api::Responses, responses, false), want);
        let responses_sse = concat!(
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"object\":\"response\",\"model\":\"gpt-4o\",\"output\":[]}}\n\n",
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"object\":\"response\",\"model\":\"gpt-4o\",\"output\":[],\"usage\":{\"input_tokens\":50,\"output_tokens\":7,\"input_tokens_details\":{\"cached_tokens\":10}}}}\n\n"
        );
        assert_eq!(read(Api::Responses, responses_sse, true), want);

        let anthropic = r#"{"type":"message","role":"assistant","model":"claude-x","content":[],"usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":100,"cache_creation_input_tokens":20}}"#;
        let want = Usage {
            input: 130,
            output: 5,
            cached: 100,
            cache_write: 20,
        };
        assert_eq!(read(Api::Messages, anthropic, false), want);
        let anthropic_sse = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"role\":\"assistant\",\"model\":\"claude-x\",\"content\":[],\"usage\":{\"input_tokens\":10,\"cache_read_input_tokens\":100,\"cache_creation_input_tokens\":20,\"output_tokens\":1}}}\n\n",
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":5}}\n\n",
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
        );
        assert_eq!(read(Api::Messages, anthropic_sse, true), want);

        // Gemini: the API's usageMetadata, and the CLI's `tokens`.
        let gemini = json!({"candidates": [], "usageMetadata": {"promptTokenCount": 30,
            "candidatesTokenCount": 4, "thoughtsTokenCount": 2, "cachedContentTokenCount": 8}});
        let u = raw(Api::Other, Some(&gemini)).unwrap();
        assert_eq!(
            Usage::of(&u),
            Some(Usage {
                input: 30,
                output: 6,
                cached: 8,
                cache_write: 0
            })
        );
        let cli =
            json!({"input": 10, "output": 3, "cached": 2, "thoughts": 1, "tool": 0, "total": 14});
        assert_eq!(
            Usage::of(&cli),
            Some(Usage {
                input: 10,
                output: 4,
                cached: 2,
                cache_write: 0
            })
        );
        assert_eq!(Usage::of(&json!({"total_tokens": 9})), None);
        assert_eq!(Usage::of(&json!(42)), None);
    }

    #[test]
    fn imported_and_recorded_diagnostics_read_alike() {
        for d in [
            json!({"model": "gpt-4o", "usage": {"prompt_tokens": 12, "completion_tokens": 14}}),
            json!({"model": "gpt-4o", "tokens": {"in": 12, "out": 14}}),
            json!({"model": "gpt-4o", "extra": {"usage": {"input_tokens": 12, "output_tokens": 14}}}),
        ] {
            let c = Call::of(&d, None);
            let u = c.usage.expect("usage");
            assert_eq!((u.input, u.output), (12, 14), "{d}");
            assert!(c.cost.is_some_and(|x| x > 0.0), "{d}");
        }
        let c = Call::of(
            &json!({"status": 502, "error": "unreachable", "partial": "cut", "latency_ms": 3.5}),
            None,
        );
        assert!(c.failed && c.is_call());
        assert_eq!((c.cut.as_deref(), c.latency_ms), (Some("cut"), Some(3.5)));
        assert!(!Call::of(&json!({"role": "user"}), None).is_call());
    }

    #[test]
    fn cost_from_the_price_table() {
        let p = Prices::parse(
            r#"{"source":"t","date":"d","models":{"gpt-4o":{"input_cost_per_token":0.0000025,"output_cost_per_token":0.00001,"cache_read_input_token_cost":0.00000125},
               "claude-x":{"input_cost_per_token":0.000003,"output_cost_per_token":0.000015,"cache_read_input_token_cost":0.0000003,"cache_creation_input_token_cost":0.00000375},
               "sample_spec":{"mode":"chat"}}}"#,
            "test",
        )
        .unwrap();
        assert_eq!(p.source, "t (d)");
        assert!(p.find("sample_spec").is_none());
        let chat = Usage::of(&json!({"prompt_tokens": 1000, "completion_tokens": 100, "prompt_tokens_details": {"cached_tokens": 400}})).unwrap();
        let c = chat.cost(&p.find("gpt-4o-2024-08-06").unwrap());
        assert!((c - (600.0 * 0.0000025 + 400.0 * 0.00000125 + 100.0 * 0.00001)).abs() < 1e-12);
        let a = Usage::of(&json!({"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20})).unwrap();
        let c = a.cost(&p.find("anthropic/claude-x").unwrap());
        assert!(
            (c - (10.0 * 0.000003 + 100.0 * 0.0000003 + 20.0 * 0.00000375 + 5.0 * 0.000015)).abs()
                < 1e-12
        );
        assert!(Prices::parse("[]", "x").is_err());
        // The embedded table parses and knows the common models.
        let e = Prices::parse(PRICES_JSON, "embedded").unwrap();
        assert!(e.source.contains("LiteLLM"));
        for m in ["gpt-4o", "gpt-4o-mini", "claude-sonnet-4-5"] {
            assert!(e.find(m).is_some(), "{m}");
        }
        assert_eq!(usd(0.0), "$0");
        assert_eq!(usd(1.254), "$1.25");
    }
}

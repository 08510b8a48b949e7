//! `convo test`'s LLM judge: a model asked whether a program's output
//! meets a criterion, through convo's own proxy, so its verdict is
//! recorded and replays like any other call.
//!
//! Each distinct question (model, criterion, output) is one session
//! titled `convo-judge:HASH` (the request's SHA-256, 16 hex digits). When
//! that session exists, the verdict is replayed from it (no network);
//! otherwise the question goes to the judge upstream (`--judge-upstream`)
//! through a recording proxy, and the next run replays it. A recorded
//! answer that is no verdict (an upstream error) is asked again under
//! `HASH.2`, `HASH.3`…

use super::{CmdResult, CommandError};
use axum::body::Body;
use convo_proxy::replay::ReplaySpec;
use convo_runtime::StorePool;
use serde_json::{Value, json};
use sha2::Digest;
use tower::ServiceExt;

/// The model asked when the assertion and the run name none.
pub const DEFAULT_MODEL: &str = "gpt-4o-mini";

/// Most sessions tried for one question before giving up.
const ATTEMPTS: usize = 5;

const INSTRUCTIONS: &str = "You are a strict test judge. You are given a criterion and a \
program's output. Decide whether the output meets the criterion. Answer with one JSON object \
and nothing else: {\"pass\": true or false, \"reason\": \"one short sentence\"}.";

/// Where the judge's questions go when no verdict is recorded.
/// (No `Debug`: it holds a key.)
#[derive(Clone, Default)]
pub struct JudgeConfig {
    /// The OpenAI-compatible upstream.
    pub upstream: Option<String>,
    /// The model, unless the assertion names one.
    pub model: Option<String>,
    /// The key sent upstream (never recorded).
    pub key: Option<String>,
}

/// A verdict: whether the output passes, why, and where it was recorded.
#[derive(Debug)]
pub struct Verdict {
    pub pass: bool,
    pub reason: String,
    pub session: String,
    pub replayed: bool,
}

/// The request the judge is sent: the same bytes for the same question.
pub fn request(model: &str, criterion: &str, output: &str) -> Vec<u8> {
    json!({
        "model": model,
        "temperature": 0,
        "messages": [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": format!(
                "Criterion:\n{criterion}\n\nProgram output:\n{output}")},
        ],
    })
    .to_string()
    .into_bytes()
}

/// The title of the `n`th session holding this question's answer.
fn title(body: &[u8], n: usize) -> String {
    let h = hex::encode(sha2::Sha256::digest(body));
    match n {
        1 => format!("convo-judge:{}", &h[..16]),
        n => format!("convo-judge:{}.{n}", &h[..16]),
    }
}

/// Asks the judge (or replays its recorded verdict). An error says why
/// no verdict could be had; the assertion then fails with it.
pub async fn judge(
    pool: &StorePool,
    cfg: &JudgeConfig,
    model: Option<&str>,
    criterion: &str,
    output: &str,
) -> Result<Verdict, String> {
    let model = model.or(cfg.model.as_deref()).unwrap_or(DEFAULT_MODEL);
    let body = request(model, criterion, output);
    let mut last_error = None;
    for n in 1..=ATTEMPTS {
        let session = title(&body, n);
        let recorded = session_exists(pool, &session).await?;
        if !recorded && cfg.upstream.is_none() {
            return Err(match last_error {
                Some(e) => format!("{e}; give --judge-upstream URL to ask the judge again"),
                None => format!(
                    "no verdict recorded for this output (session {session}); \
                     give --judge-upstream URL to ask the judge once"
                ),
            });
        }
        let (status, answer) = ask(pool, cfg, &session, recorded, &body).await?;
        match verdict(status, &answer) {
            Ok((pass, reason)) => {
                return Ok(Verdict {
                    pass,
                    reason,
                    session,
                    replayed: recorded,
                });
            }
            Err(e) => last_error = Some(format!("the judge's answer in session {session}: {e}")),
        }
    }
    Err(last_error.unwrap_or_else(|| "the judge gave no verdict".into()))
}

async fn session_exists(pool: &StorePool, title: &str) -> Result<bool, String> {
    let t = title.to_owned();
    match pool.run(move |s| s.find_session(&t)).await {
        Ok(_) => Ok(true),
        Err(convo_store::StoreError::NoSession(_)) => Ok(false),
        Err(e) => Err(format!("cannot read the store: {e}")),
    }
}

/// One call through a proxy: replaying `session` when it is recorded,
/// recording into it otherwise.
async fn ask(
    pool: &StorePool,
    cfg: &JudgeConfig,
    session: &str,
    recorded: bool,
    body: &[u8],
) -> Result<(u16, Vec<u8>), String> {
    let mut pc = convo_proxy::ProxyConfig::new(cfg.upstream.clone());
    pc.upstream_key = cfg.key.clone();
    if recorded {
        let mut spec = ReplaySpec::with_branch(session, "main")?;
        spec.matcher.strict = true;
        spec.repeats = true;
        pc.replay = Some(spec);
    }
    let proxy = convo_proxy::Proxy::start(pc, pool.clone(), None)
        .await
        .map_err(|e| format!("cannot start the judge's proxy: {e}"))?;
    let req = axum::http::Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .header("x-convo-session", session)
        .body(Body::from(body.to_vec()))
        .map_err(|e| e.to_string())?;
    let resp = convo_proxy::router(proxy.clone())
        .oneshot(req)
        .await
        .map_err(|e| format!("the judge's proxy failed: {e}"))?;
    let status = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), 16 << 20)
        .await
        .map_err(|e| format!("the judge's answer could not be read: {e}"))?;
    // The record is written before the next run looks for it.
    proxy.recordings_written().await;
    Ok((status, bytes.to_vec()))
}

/// Reads `{"pass": …, "reason": …}` from a chat completion (the object
/// may sit inside other words or a code fence), or a leading PASS/FAIL.
pub fn verdict(status: u16, answer: &[u8]) -> Result<(bool, String), String> {
    let doc: Value = serde_json::from_slice(answer)
        .map_err(|_| format!("HTTP {status}, not JSON: {}", lossy(answer)))?;
    if status != 200 {
        let why = doc["error"]["message"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| lossy(answer));
        return Err(format!("HTTP {status}: {why}"));
    }
    let text = doc["choices"][0]["message"]["content"]
        .as_str()
        .ok_or_else(|| format!("no message content: {}", lossy(answer)))?;
    let object = text
        .find('{')
        .zip(text.rfind('}'))
        .filter(|(a, b)| a < b)
        .and_then(|(a, b)| serde_json::from_str::<Value>(&text[a..=b]).ok());
    if let Some(pass) = object.as_ref().and_then(|o| o["pass"].as_bool()) {
        let reason = object
            .as_ref()
            .and_then(|o| o["reason"].as_str())
            .unwrap_or("")
            .to_owned();
        return Ok((pass, reason));
    }
    let word = text.trim_start().to_ascii_uppercase();
    match () {
        _ if word.starts_with("PASS") => Ok((true, text.trim().to_owned())),
        _ if word.starts_with("FAIL") => Ok((false, text.trim().to_owned())),
        _ => Err(format!("no verdict in {:?}", clip(text))),
    }
}

fn lossy(b: &[u8]) -> String {
    clip(&String::from_utf8_lossy(b))
}

/// At most 200 characters of `s`, for a message.
fn clip(s: &str) -> String {
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// `--judge-upstream` must be a URL the proxy can reach.
pub fn check_upstream(url: &str) -> CmdResult<()> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(CommandError::user(format!(
            "--judge-upstream {url}: give an http:// or https:// URL"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(content: &str) -> Vec<u8> {
        json!({"choices": [{"message": {"role": "assistant", "content": content}}]})
            .to_string()
            .into_bytes()
    }

    #[test]
    fn verdicts_are_read_from_json_in_words_or_a_leading_word() {
        let v = verdict(
            200,
            &answer("```json\n{\"pass\": false, \"reason\": \"no\"}\n```"),
        );
        assert_eq!(v, Ok((false, "no".into())));
        assert_eq!(
            verdict(200, &answer("{\"pass\": true}")),
            Ok((true, String::new()))
        );
        assert_eq!(
            verdict(200, &answer("PASS: it says so")).map(|v| v.0),
            Ok(true)
        );
        assert!(verdict(200, &answer("maybe")).is_err());
        let e = verdict(429, br#"{"error": {"message": "slow down"}}"#);
        assert!(
            matches!(&e, Err(m) if m.contains("429") && m.contains("slow down")),
            "{e:?}"
        );
    }

    #[test]
    fn one_question_one_title() {
        let a = request("m", "says hi", "hi");
        assert_eq!(a, request("m", "says hi", "hi"));
        assert_ne!(title(&a, 1), title(&request("m", "says hi", "ho"), 1));
        assert!(title(&a, 2).ends_with(".2"));
    }
}

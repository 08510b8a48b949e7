//! The agent: a URL the harness posts to, or a child process it starts.

use crate::http::{Answer, CallError, Client, Target};
use crate::{HarnessError, Result};
use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderValue, Method, header};
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Which agent to talk to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentSpec {
    /// A running agent: each input is a `POST` to this URL (`/invoke` when
    /// the URL has no path).
    Url(String),
    /// A command started as a child process with `PORT` and the service
    /// variables in its environment; inputs go to `/invoke` on that port.
    Command(Vec<String>),
}

/// How the harness talks to the agent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Dialect {
    /// convo's contract: a JSON invoke body (`input`, `session`, `branch`,
    /// `submission`, `services`), answered `{"output": TEXT}` or text; a
    /// child is ready when it accepts connections.
    #[default]
    Convo,
    /// VlinderCLI's: the input as the raw body of `POST /invoke`, answered
    /// with raw text; ready when `GET /health` answers 200; services at
    /// `*.vlinder.local` (reached through `HTTP_PROXY`).
    Vlinder,
}

/// The environment a child agent gets besides `PORT`.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChildEnv {
    pub vars: Vec<(String, String)>,
    /// Its working directory (default: convo's).
    pub dir: Option<std::path::PathBuf>,
}

#[derive(Debug)]
struct Child {
    argv: Vec<String>,
    port: u16,
    process: tokio::process::Child,
    env: ChildEnv,
}

/// A started agent.
#[derive(Debug)]
pub(crate) struct Agent {
    client: Client,
    path: String,
    child: Option<Child>,
    start_timeout: Duration,
    dialect: Dialect,
}

fn cmdline(argv: &[String]) -> String {
    argv.join(" ")
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0))
        .map_err(|e| HarnessError::io("cannot find a free port for the agent", e))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| HarnessError::io("cannot find a free port for the agent", e))
}

impl Agent {
    /// Connects to (URL) or starts (command) the agent and waits until it
    /// accepts connections.
    pub async fn start(
        spec: &AgentSpec,
        env: ChildEnv,
        start_timeout: Duration,
        dialect: Dialect,
    ) -> Result<Agent> {
        match spec {
            AgentSpec::Url(url) => {
                let mut target = Target::parse(url).map_err(|why| HarnessError::BadUrl {
                    what: "agent URL",
                    url: url.clone(),
                    why,
                })?;
                let path = if target.path.is_empty() {
                    "/invoke".to_owned()
                } else {
                    std::mem::take(&mut target.path)
                };
                let mut agent = Agent {
                    client: Client::new(target),
                    path,
                    child: None,
                    start_timeout,
                    dialect,
                };
                if dialect == Dialect::Vlinder {
                    agent.wait_healthy(url).await?;
                }
                Ok(agent)
            }
            AgentSpec::Command(argv) => {
                if argv.is_empty() {
                    return Err(HarnessError::Usage(
                        "no agent command given after `--`".into(),
                    ));
                }
                let child = spawn(argv, env, start_timeout, dialect).await?;
                Ok(Agent {
                    client: Client::new(Target {
                        host: "127.0.0.1".into(),
                        port: child.port,
                        path: String::new(),
                    }),
                    path: "/invoke".into(),
                    child: Some(child),
                    start_timeout,
                    dialect,
                })
            }
        }
    }

    /// Polls `GET /health` on a running agent until it answers 200.
    async fn wait_healthy(&mut self, url: &str) -> Result<()> {
        let deadline = Instant::now() + self.start_timeout;
        loop {
            let r = self
                .client
                .call(Method::GET, "/health", &HeaderMap::new(), Bytes::new())
                .await;
            match r {
                Ok(a) if a.status == 200 => return Ok(()),
                _ => self.client.reset(),
            }
            if Instant::now() >= deadline {
                return Err(HarnessError::AgentStartTimeout {
                    cmd: format!("{url} (GET /health)"),
                    port: self.client.target.port,
                    secs: self.start_timeout.as_secs(),
                });
            }
            tokio::time::sleep(Duration::from_millis(15)).await;
        }
    }

    /// The dialect the agent speaks.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// Posts one invoke body, handing the answer's body to `sink` as it
    /// arrives.
    pub async fn invoke(
        &mut self,
        body: Bytes,
        sink: &mut (dyn FnMut(u16, &HeaderMap, &[u8]) + Send),
    ) -> Result<Answer, CallError> {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(match self.dialect {
                Dialect::Convo => "application/json",
                Dialect::Vlinder => "text/plain; charset=utf-8",
            }),
        );
        let path = self.path.clone();
        let r = self
            .client
            .call_streaming(Method::POST, &path, &headers, body, sink)
            .await;
        if r.is_err() {
            self.client.reset();
        }
        r
    }

    /// Drops the kept connection (the agent may still answer a request the
    /// harness gave up on).
    pub fn reset(&mut self) {
        self.client.reset();
    }

    /// For a child: how it exited, if it has (waiting up to `grace` for it).
    pub async fn exited(&mut self, grace: Duration) -> Option<String> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + grace;
        loop {
            match child.process.try_wait() {
                Ok(Some(status)) => return Some(status.to_string()),
                Ok(None) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await
                }
                _ => return None,
            }
        }
    }

    /// For a child that exited or hung: stops it and starts a fresh one on
    /// a new port. Returns whether it restarted.
    pub async fn restart(&mut self) -> Result<bool> {
        let Some(old) = self.child.take() else {
            return Ok(false);
        };
        let Child {
            argv,
            mut process,
            env,
            ..
        } = old;
        let _ = process.kill().await;
        let child = spawn(&argv, env, self.start_timeout, self.dialect).await?;
        self.client = Client::new(Target {
            host: "127.0.0.1".into(),
            port: child.port,
            path: String::new(),
        });
        self.child = Some(child);
        Ok(true)
    }

    /// Kills a child process (a hung one); the next turn starts a new one.
    pub async fn kill_child(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.process.kill().await;
        }
    }

    /// Whether the agent is a child process.
    pub fn is_child(&self) -> bool {
        self.child.is_some()
    }

    /// Stops a child process (the harness started it, so it ends it).
    pub async fn stop(&mut self) {
        self.client.reset();
        if let Some(mut c) = self.child.take() {
            let _ = c.process.kill().await;
        }
    }
}

/// Whether `GET /health` on the port answers 200.
async fn healthy(port: u16) -> bool {
    let mut c = Client::new(Target {
        host: "127.0.0.1".into(),
        port,
        path: String::new(),
    });
    matches!(
        c.call(Method::GET, "/health", &HeaderMap::new(), Bytes::new()).await,
        Ok(a) if a.status == 200
    )
}

async fn spawn(
    argv: &[String],
    env: ChildEnv,
    start_timeout: Duration,
    dialect: Dialect,
) -> Result<Child> {
    let port = free_port()?;
    let cmd = cmdline(argv);
    let mut command = tokio::process::Command::new(&argv[0]);
    command
        .args(&argv[1..])
        .env("PORT", port.to_string())
        .envs(env.vars.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        // The agent's own output must not mix with answers on stdout.
        .stdout(Stdio::from(std::io::stderr()))
        .stderr(Stdio::inherit())
        .kill_on_drop(true);
    if let Some(d) = &env.dir {
        command.current_dir(d);
    }
    // Its own process group: Ctrl-C in `convo chat` ends the turn, not the agent.
    #[cfg(unix)]
    command.process_group(0);
    let mut process = command.spawn().map_err(|source| HarnessError::Spawn {
        cmd: cmd.clone(),
        source,
    })?;
    let deadline = Instant::now() + start_timeout;
    loop {
        if let Ok(Some(status)) = process.try_wait() {
            return Err(HarnessError::AgentExited {
                cmd,
                port,
                status: status.to_string(),
            });
        }
        let ready = match dialect {
            Dialect::Convo => tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok(),
            Dialect::Vlinder => healthy(port).await,
        };
        if ready {
            break;
        }
        if Instant::now() >= deadline {
            let _ = process.kill().await;
            return Err(HarnessError::AgentStartTimeout {
                cmd,
                port,
                secs: start_timeout.as_secs(),
            });
        }
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    Ok(Child {
        argv: argv.to_vec(),
        port,
        process,
        env,
    })
}

//! `certify --mcp-command`: the effect is a `tools/call` to an MCP server
//! this process spawns over stdio, with the operation id and the provider
//! key in the request's `_meta` (as effect-mcp's `RemoteTool` sends them).
//! The probe and the count are tools of the same server.
//!
//! A lost response is the library's lost acknowledgement; a kill is the
//! crash fault: the worker "dies" right after the server committed, and the
//! server it spawned dies with it (SIGKILL). The next call spawns a new
//! server, so the server must keep its effects somewhere a new process
//! finds them, as a real provider does.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use anyhow::{Context, anyhow};
use effect_core::{CallbackError, OutcomeProbeResult};
use effect_exec::{HandlerContext, HandlerError};
use effect_mcp::{meta, output_of, text_of};
use effect_testkit::certify::Certification;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use rmcp::service::{Peer, RoleClient, RunningService, ServiceError};
use serde_json::Value;

use super::Spec;
use super::template::count_of;
use crate::cli::CertifyArgs;

/// The server's command line and the runtime its connection lives on.
pub(crate) struct Target {
    link: Arc<Link>,
}

struct Link {
    runtime: tokio::runtime::Runtime,
    program: String,
    args: Vec<String>,
    current: Mutex<Option<Server>>,
    spawned: AtomicUsize,
}

/// One spawned server and its session.
struct Server {
    service: RunningService<RoleClient, ()>,
    child: tokio::process::Child,
}

impl Target {
    /// Parses `command` (shell-style words) and starts the runtime; the
    /// server is spawned on the first call.
    pub(crate) fn new(args: &CertifyArgs, command: &str) -> anyhow::Result<Self> {
        if args.tool.is_none() {
            return Err(anyhow!(
                "--mcp-command needs --tool, the tool that performs the effect"
            ));
        }
        let mut words = shlex::split(command)
            .filter(|words| !words.is_empty())
            .ok_or_else(|| anyhow!("--mcp-command {command:?} is not a command line"))?;
        let program = words.remove(0);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .context("could not start the async runtime")?;
        Ok(Target {
            link: Arc::new(Link {
                runtime,
                program,
                args: words,
                current: Mutex::new(None),
                spawned: AtomicUsize::new(0),
            }),
        })
    }

    /// The certification of the tool, with the probe and count tools.
    pub(crate) fn certification(
        &self,
        args: &CertifyArgs,
        spec: &Spec,
    ) -> anyhow::Result<Certification> {
        let tool = args.tool.clone().context("--mcp-command needs --tool")?;
        // The server must start and offer the tools before anything is judged.
        let offered = self.link.tools()?;
        let wanted = [
            Some(&tool),
            args.probe_tool.as_ref(),
            args.count_tool.as_ref(),
        ];
        for name in wanted.into_iter().flatten() {
            if !offered.contains(name) {
                return Err(anyhow!(
                    "the MCP server offers no tool {name:?} (it offers {})",
                    offered.join(", ")
                ));
            }
        }
        let probe = args.probe_tool.clone().map(|probe_tool| {
            let link = Arc::clone(&self.link);
            let authoritative = args.probe_authoritative;
            move |arguments: &Value, key: Option<&str>| {
                let result = link
                    .call(&probe_tool, arguments, None, key)
                    .map_err(CallbackError::new)?;
                Ok(if result.is_error == Some(true) {
                    if authoritative {
                        OutcomeProbeResult::not_committed().evidence("source", "mcp_probe_tool")
                    } else {
                        OutcomeProbeResult::unknown()
                    }
                } else {
                    OutcomeProbeResult::committed(output_of(result))
                        .evidence("source", "mcp_probe_tool")
                })
            }
        });
        let contract = spec.contract(probe)?;
        let link = Arc::clone(&self.link);
        let handler = move |arguments: Value, context: HandlerContext| {
            let result = link
                .call(
                    &tool,
                    &arguments,
                    Some(context.operation_id()),
                    context.provider_key(),
                )
                .map_err(HandlerError::unknown)?;
            if result.is_error == Some(true) {
                // Another server's error result may come after the tool ran.
                return Err(HandlerError::unknown(format!(
                    "the tool answered with an error: {}",
                    text_of(&result)
                )));
            }
            Ok(output_of(result))
        };
        let killed = Arc::clone(&self.link);
        let mut certification = spec
            .certification(contract, handler)
            .on_crash(move || killed.kill());
        if let Some(count_tool) = args.count_tool.clone() {
            let link = Arc::clone(&self.link);
            certification = certification.count_effects(move |arguments| {
                let result = link.call(&count_tool, arguments, None, None)?;
                if result.is_error == Some(true) {
                    return Err(
                        format!("the count tool answered an error: {}", text_of(&result)).into(),
                    );
                }
                Ok(count_of(&output_of(result))?)
            });
        }
        Ok(certification)
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        self.link.kill();
    }
}

impl Link {
    fn lock(&self) -> MutexGuard<'_, Option<Server>> {
        // An Option of a connection: whole after any panic.
        self.current.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current session's peer, spawning a server when there is none.
    fn peer(&self) -> Result<Peer<RoleClient>, String> {
        let mut current = self.lock();
        if let Some(server) = current.as_ref().filter(|s| !s.service.is_closed()) {
            return Ok(server.service.peer().clone());
        }
        let server = self.runtime.block_on(self.spawn())?;
        let peer = server.service.peer().clone();
        *current = Some(server);
        Ok(peer)
    }

    async fn spawn(&self) -> Result<Server, String> {
        let mut command = tokio::process::Command::new(&self.program);
        command
            .args(&self.args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .map_err(|err| format!("could not spawn the MCP server {:?}: {err}", self.program))?;
        self.spawned.fetch_add(1, Ordering::SeqCst);
        let stdout = child.stdout.take().ok_or("the MCP server has no stdout")?;
        let stdin = child.stdin.take().ok_or("the MCP server has no stdin")?;
        let service = ()
            .serve((stdout, stdin))
            .await
            .map_err(|err| format!("the MCP session did not start: {err}"))?;
        Ok(Server { service, child })
    }

    /// The names of the server's tools.
    fn tools(&self) -> anyhow::Result<Vec<String>> {
        let peer = self.peer().map_err(|e| anyhow!(e))?;
        let tools = self
            .runtime
            .block_on(peer.list_all_tools())
            .context("the MCP server did not list its tools")?;
        Ok(tools
            .into_iter()
            .map(|tool| tool.name.to_string())
            .collect())
    }

    /// One `tools/call`; a transport failure drops the session, so the next
    /// call spawns a new server.
    fn call(
        &self,
        tool: &str,
        arguments: &Value,
        operation_id: Option<&str>,
        key: Option<&str>,
    ) -> Result<CallToolResult, String> {
        let Value::Object(fields) = arguments else {
            return Err("the arguments are not a JSON object".to_owned());
        };
        let mut request_meta = RequestMetaObject::new();
        if let Some(id) = operation_id {
            request_meta
                .0
                .insert(meta::OPERATION_ID.to_owned(), Value::String(id.to_owned()));
        }
        if let Some(key) = key {
            request_meta.0.insert(
                meta::IDEMPOTENCY_KEY.to_owned(),
                Value::String(key.to_owned()),
            );
        }
        let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(fields.clone());
        params.meta = Some(request_meta);
        let peer = self.peer()?;
        match self.runtime.block_on(peer.call_tool(params)) {
            Ok(result) => Ok(result),
            Err(err @ (ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                self.kill();
                Err(format!(
                    "the connection to the MCP server was lost during {tool}: {err}"
                ))
            }
            Err(err) => Err(format!("{tool}: {err}")),
        }
    }

    /// Kills the current server (SIGKILL) and forgets its session.
    fn kill(&self) {
        let server = self.lock().take();
        if let Some(mut server) = server {
            let _ = server.child.start_kill();
            self.runtime.block_on(async {
                let _ = server.child.wait().await;
                let _ = server.service.cancel().await;
            });
        }
    }
}

//! `run_python` as a task (HTTP, a client that declared `io.modelcontextprotocol/tasks`
//! on the request), and `tasks/get` / `tasks/cancel`: crate::tasks keeps the state, bound
//! to the principal; this is where calls meet it and are audited.

use std::sync::Arc;
use std::time::Instant;

use rmcp::model::{
    CallToolResponse, CancelTaskParams, CreateTaskResult, GetTaskParams, GetTaskResult,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use tracing::{info, warn};

use super::{outcome_of, peer_of, Call, VivariumServer};
use crate::limiter::Admission;
use crate::principal::Principal;
use crate::tasks::{self, Outcome, TaskStore, TASK_META_KEY};
use crate::tenants::Tenant;
use crate::tool::RunPythonArgs;

impl VivariumServer {
    pub(super) fn task_store(&self) -> Option<&Arc<TaskStore>> {
        self.inner.tasks.as_ref()
    }

    /// Whether this call becomes a task: over HTTP, for a client that declared the
    /// extension on this request, when `_meta` `vivarium/task` says so or, without it,
    /// when `timeout_seconds` is above `[tasks] threshold_seconds`.
    pub(super) fn wants_task(
        &self,
        context: &RequestContext<RoleServer>,
        args: &RunPythonArgs,
    ) -> bool {
        let (Some(http), Some(_)) = (self.http(), self.task_store()) else {
            return false;
        };
        let declared = context
            .client_capabilities()
            .is_some_and(|caps| caps.supports_tasks());
        if !declared {
            return false;
        }
        match context
            .meta
            .get(TASK_META_KEY)
            .and_then(serde_json::Value::as_bool)
        {
            Some(explicit) => explicit,
            None => args
                .timeout_seconds
                .is_some_and(|t| t > http.tasks.threshold_seconds),
        }
    }

    /// Make the task (it resolves before this returns), start its run, and answer with
    /// it; a tool error when the principal holds too many.
    pub(super) fn start_task(
        &self,
        principal: &Principal,
        tenant: Arc<Tenant>,
        admitted: Option<Admission>,
        args: RunPythonArgs,
    ) -> CallToolResponse {
        let Some(store) = self.task_store().cloned() else {
            return self.tool_error("tasks are not served here".into()).into();
        };
        let created = match store.create(&principal.key) {
            Ok(created) => created,
            Err(refused) => return self.tool_error(refused.to_string()).into(),
        };
        let id = created.id.clone();
        info!(task = %id, "run_python became a task");
        let ct = created.cancel.clone();
        let server = self.clone();
        // The run: the task's own token, no peer; the request that made it may end.
        let runner = tokio::spawn(async move {
            let call = Call {
                ct: call_ct(&ct),
                peer: None,
            };
            let started = Instant::now();
            let (result, note) =
                crate::audit::noting(server.admit_and_run(&tenant, admitted, args, &call, None))
                    .await;
            (result, note, started.elapsed(), ct.is_cancelled())
        });
        let server = self.clone();
        let owner = principal.clone();
        tokio::spawn(async move {
            let mut record = crate::audit::Record::by("tasks/finished", &owner);
            record.task = Some(id.clone());
            record.tool = Some(crate::tool::TOOL_NAME.into());
            let outcome = match runner.await {
                Ok((result, note, took, cancelled)) => {
                    record.job_id = note.job_id;
                    record.session = note.session;
                    record.profile = note.profile;
                    record.duration_ms = Some(took.as_millis() as u64);
                    // A run that succeeded before the cancel took hold keeps its result
                    // (cancellation is cooperative); one cut short ends cancelled.
                    if cancelled && result.is_error == Some(true) {
                        record.outcome = "cancelled".into();
                        Outcome::Cancelled
                    } else {
                        record.outcome = outcome_of(&result);
                        Outcome::Completed(result)
                    }
                }
                Err(e) => {
                    warn!(task = %id, error = %e, "a task's run ended without a result");
                    record.outcome = "failed".into();
                    Outcome::Failed(ErrorData::internal_error(
                        "the task's run ended without a result",
                        None,
                    ))
                }
            };
            store.finish(&owner.key, &id, outcome);
            if let Some(http) = server.http() {
                http.audit.write(record);
            }
        });
        CallToolResponse::Task(CreateTaskResult::new(created.task))
    }

    /// `tasks/get`: the caller's own task, else "no such task" (unknown and another
    /// principal's alike).
    pub(super) async fn get_task_as(
        &self,
        request: GetTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        let principal = self.principal(&context)?;
        let store = self.task_store().ok_or_else(tasks_not_served)?;
        let found = store.get(&principal.key, &request.task_id);
        self.audit_task("tasks/get", &principal, &context, &request.task_id, || {
            found.as_ref().map(|t| status_name(t.status()).to_string())
        });
        match found {
            Some(task) => Ok(GetTaskResult::new(task)),
            None => Err(tasks::not_found(&request.task_id)),
        }
    }

    /// `tasks/cancel`: kill the caller's own task's job (the task ends `cancelled`); a
    /// finished task keeps its status. Another principal's id: "no such task".
    pub(super) async fn cancel_task_as(
        &self,
        request: CancelTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let principal = self.principal(&context)?;
        let store = self.task_store().ok_or_else(tasks_not_served)?;
        let status = store.cancel(&principal.key, &request.task_id);
        self.audit_task(
            "tasks/cancel",
            &principal,
            &context,
            &request.task_id,
            || {
                status.map(|s| {
                    if s.is_terminal() {
                        format!("already_{}", status_name(s))
                    } else {
                        "cancelling".to_string()
                    }
                })
            },
        );
        match status {
            Some(_) => {
                info!(task = %request.task_id, "tasks/cancel: the job is being killed");
                Ok(())
            }
            None => Err(tasks::not_found(&request.task_id)),
        }
    }

    /// `tasks/update`: a run_python task never asks for input, so there is nothing to
    /// answer (unknown keys are ignored, as the extension says); another principal's id:
    /// "no such task".
    pub(super) async fn update_task_as(
        &self,
        request: rmcp::model::UpdateTaskParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let principal = self.principal(&context)?;
        let store = self.task_store().ok_or_else(tasks_not_served)?;
        let found = store.holds(&principal.key, &request.task_id);
        self.audit_task(
            "tasks/update",
            &principal,
            &context,
            &request.task_id,
            || found.then(|| "ignored".to_string()),
        );
        if found {
            Ok(())
        } else {
            Err(tasks::not_found(&request.task_id))
        }
    }

    fn audit_task(
        &self,
        event: &str,
        principal: &Principal,
        context: &RequestContext<RoleServer>,
        id: &str,
        outcome: impl FnOnce() -> Option<String>,
    ) {
        let Some(http) = self.http() else {
            return;
        };
        let mut record = crate::audit::Record::by(event, principal);
        record.peer = peer_of(context);
        record.task = Some(id.to_string());
        record.outcome = outcome().unwrap_or_else(|| "not_found".into());
        http.audit.write(record);
    }
}

/// The run's token: the task's own (a child, so the run cannot cancel the task's).
fn call_ct(ct: &tokio_util::sync::CancellationToken) -> tokio_util::sync::CancellationToken {
    ct.child_token()
}

fn tasks_not_served() -> ErrorData {
    ErrorData::method_not_found::<rmcp::model::GetTaskMethod>()
}

fn status_name(status: rmcp::model::TaskStatus) -> &'static str {
    use rmcp::model::TaskStatus as S;
    match status {
        S::Working => "working",
        S::InputRequired => "input_required",
        S::Completed => "completed",
        S::Failed => "failed",
        S::Cancelled => "cancelled",
        _ => "unknown",
    }
}

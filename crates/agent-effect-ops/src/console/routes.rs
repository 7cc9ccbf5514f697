//! The router: every page, fragment, action and asset, behind
//! authentication (when configured) and the security headers.

use std::net::SocketAddr;

use axum::Router;
use axum::extract::connect_info::ConnectInfo;
use axum::extract::{Form, FromRequestParts, Path, Query, Request, State};
use axum::http::header::{self, HeaderValue};
use axum::http::request::Parts;
use axum::http::{Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::{Markup, html};
use serde::Deserialize;

use crate::console::actions::{self, ACTIONS, ActionForm};
use crate::console::auth::{Identity, SESSION_COOKIE, Via};
use crate::console::charts::{self, CHARTS, Period};
use crate::console::operation;
use crate::console::pages::{self, Frame, message, page};
use crate::console::queue::{self, Filter};
use crate::console::{Console, live, metrics, views};

/// Only the console's own files; no inline script or style, no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

pub(crate) fn router(console: Console) -> Router {
    Router::new()
        .route("/", get(queue_page))
        .route("/queue/fragment", get(queue_fragment))
        .route("/operations/{id}", get(operation_page))
        .route("/operations/{id}/state", get(operation_state))
        .route("/operations/{id}/timeline", get(operation_timeline))
        .route("/operations/{id}/{action}", post(act))
        .route("/approvals", get(approvals_page))
        .route("/approvals/fragment", get(approvals_fragment))
        .route("/budgets", get(budgets_page))
        .route("/budgets/fragment", get(budgets_fragment))
        .route("/charts", get(charts_page))
        .route("/charts/{file}", get(chart_svg))
        .route("/search", get(search))
        .route("/metrics", get(metrics_text))
        .route("/live", get(live_stream))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/static/{file}", get(asset))
        .layer(middleware::from_fn(security_headers))
        .with_state(console)
}

async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// The authenticated requester: every handler but login and the assets
/// takes one, so no view is reachable without it when auth is configured.
struct Viewer(Identity);

impl FromRequestParts<Console> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, Response> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|info| info.0.ip());
        match console.inner.auth.identify(&parts.headers, peer) {
            Some(identity) => Ok(Viewer(identity)),
            None if parts.method == Method::GET && console.inner.auth.has_tokens() => {
                Err(Redirect::to("/login").into_response())
            }
            None => Err((
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "authentication required\n",
            )
                .into_response()),
        }
    }
}

impl Console {
    fn frame<'a>(&self, identity: &'a Identity) -> Frame<'a> {
        Frame {
            identity: (identity.via != Via::Nobody).then_some(identity),
            csrf: self.inner.auth.csrf(identity),
        }
    }

    fn actions_enabled(&self) -> bool {
        self.inner.config.actions.enabled
    }
}

/// A failed read, as a page.
fn failed(err: &anyhow::Error) -> Response {
    (
        StatusCode::INTERNAL_SERVER_ERROR,
        Html(
            html! { (message("error", &format!("cannot read the ledger: {err:#}"))) }.into_string(),
        ),
    )
        .into_response()
}

fn render(markup: Markup) -> Response {
    Html(markup.into_string()).into_response()
}

async fn queue_page(
    State(console): State<Console>,
    Viewer(identity): Viewer,
    Query(filter): Query<Filter>,
) -> Response {
    let f = filter.clone();
    match console
        .read(move |c| queue::read(c.inner.opened.ledger(), &f, c.inner.clock.as_ref()))
        .await
    {
        Ok(queue) => render(pages::queue_page(
            &console.frame(&identity),
            &queue,
            &filter,
        )),
        Err(err) => failed(&err),
    }
}

async fn queue_fragment(
    State(console): State<Console>,
    Viewer(_): Viewer,
    Query(filter): Query<Filter>,
) -> Response {
    let f = filter.clone();
    match console
        .read(move |c| queue::read(c.inner.opened.ledger(), &f, c.inner.clock.as_ref()))
        .await
    {
        Ok(queue) => render(pages::queue_region(&queue, &filter)),
        Err(err) => failed(&err),
    }
}

async fn read_operation(
    console: &Console,
    id: String,
) -> anyhow::Result<Option<operation::Detail>> {
    console
        .read(move |c| {
            let now = effect_core::unix_seconds(c.inner.clock.now());
            operation::read(
                c.inner.opened.ledger(),
                &id,
                &c.inner.config.dashboards,
                now,
            )
        })
        .await
}

fn not_found(console: &Console, identity: &Identity, id: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        render(page(
            &console.frame(identity),
            "Not found",
            html! { h1 { "Not found" } (message("error", &format!("no operation {id:?} in this ledger"))) },
        )),
    )
        .into_response()
}

/// One operation rendered by `view`: its page or one of its regions, or
/// "not found" in the console's frame.
async fn operation_view(
    console: &Console,
    identity: &Identity,
    id: String,
    view: impl FnOnce(&operation::Detail) -> Markup,
) -> Response {
    match read_operation(console, id.clone()).await {
        Ok(Some(detail)) => render(view(&detail)),
        Ok(None) => not_found(console, identity, &id),
        Err(err) => failed(&err),
    }
}

async fn operation_page(
    State(console): State<Console>,
    Viewer(identity): Viewer,
    Path(id): Path<String>,
) -> Response {
    let frame = console.frame(&identity);
    let actions = console.actions_enabled();
    operation_view(&console, &identity, id, |detail| {
        operation::render(&frame, detail, actions, None)
    })
    .await
}

async fn operation_state(
    State(console): State<Console>,
    Viewer(identity): Viewer,
    Path(id): Path<String>,
) -> Response {
    operation_view(&console, &identity, id, operation::state_region).await
}

async fn operation_timeline(
    State(console): State<Console>,
    Viewer(identity): Viewer,
    Path(id): Path<String>,
) -> Response {
    operation_view(&console, &identity, id, |detail| {
        pages::timeline(&detail.events)
    })
    .await
}

/// An action: refused unless actions are enabled, the identity may take
/// it and the form carries its CSRF token; then the CLI's command.
async fn act(
    State(console): State<Console>,
    Viewer(identity): Viewer,
    Path((id, action)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    let refuse = |status: StatusCode, text: &str| (status, format!("{text}\n")).into_response();
    if !console.actions_enabled() {
        return refuse(
            StatusCode::FORBIDDEN,
            "actions are disabled: this console is read-only ([actions] enabled = true in its configuration)",
        );
    }
    if !ACTIONS.contains(&action.as_str()) {
        return refuse(StatusCode::NOT_FOUND, &format!("no action {action:?}"));
    }
    if !identity.may(&action) {
        return refuse(
            StatusCode::FORBIDDEN,
            &format!(
                "{} (role {}) may not {action}",
                identity.name,
                identity.role.name()
            ),
        );
    }
    if !console.inner.auth.csrf_ok(&identity, form.csrf.as_deref()) {
        return refuse(
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or wrong: reload the page and send it again",
        );
    }
    let outcome = match actions::command(&action, &id, &identity.name, &form) {
        Ok(command) => {
            console
                .read(move |c| {
                    Ok(actions::run(
                        &c.inner.opened,
                        &command,
                        std::sync::Arc::clone(&c.inner.clock),
                    ))
                })
                .await
        }
        Err(why) => Ok(actions::Outcome {
            status: StatusCode::BAD_REQUEST,
            message: format!("refused: {why}"),
        }),
    };
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(err) => return failed(&err),
    };
    // A bearer client (a script) gets the outcome as text; a browser the page.
    if identity.via == Via::Bearer {
        return (outcome.status, format!("{}\n", outcome.message)).into_response();
    }
    match read_operation(&console, id.clone()).await {
        Ok(Some(detail)) => (
            outcome.status,
            render(operation::render(
                &console.frame(&identity),
                &detail,
                console.actions_enabled(),
                Some(operation::notice(
                    outcome.status.is_success(),
                    &outcome.message,
                )),
            )),
        )
            .into_response(),
        Ok(None) => not_found(&console, &identity, &id),
        Err(err) => failed(&err),
    }
}

async fn approvals_page(State(console): State<Console>, Viewer(identity): Viewer) -> Response {
    match console
        .read(|c| views::read_approvals(c.inner.opened.ledger()))
        .await
    {
        Ok(asked) => render(views::approvals(&console.frame(&identity), &asked)),
        Err(err) => failed(&err),
    }
}

async fn approvals_fragment(State(console): State<Console>, Viewer(_): Viewer) -> Response {
    match console
        .read(|c| views::read_approvals(c.inner.opened.ledger()))
        .await
    {
        Ok(asked) => render(html! {
            div #approvals hx-get="/approvals/fragment" hx-trigger="ledger-changed from:body" hx-swap="outerHTML" {
                (views::approvals_region(&asked))
            }
        }),
        Err(err) => failed(&err),
    }
}

async fn read_budgets(console: &Console) -> anyhow::Result<Vec<effect_core::BudgetUse>> {
    console
        .read(|c| Ok(c.inner.opened.ledger().stats()?.budgets))
        .await
}

async fn budgets_page(State(console): State<Console>, Viewer(identity): Viewer) -> Response {
    match read_budgets(&console).await {
        Ok(budgets) => render(views::budgets(&console.frame(&identity), &budgets)),
        Err(err) => failed(&err),
    }
}

async fn budgets_fragment(State(console): State<Console>, Viewer(_): Viewer) -> Response {
    match read_budgets(&console).await {
        Ok(budgets) => render(html! {
            div #budgets hx-get="/budgets/fragment" hx-trigger="ledger-changed from:body" hx-swap="outerHTML" {
                (views::budgets_region(&budgets))
            }
        }),
        Err(err) => failed(&err),
    }
}

#[derive(Debug, Deserialize)]
struct PeriodQuery {
    #[serde(default)]
    period: Option<String>,
}

async fn charts_page(
    State(console): State<Console>,
    Viewer(identity): Viewer,
    Query(query): Query<PeriodQuery>,
) -> Response {
    let period = Period::parse(query.period.as_deref());
    render(page(
        &console.frame(&identity),
        "Charts",
        html! {
            h1 { "Charts" }
            p {
                "Period: "
                @for p in Period::ALL {
                    @if p.name == period.name { strong { (p.name) } } @else { a href=(format!("/charts?period={}", p.name)) { (p.name) } }
                    " "
                }
                span.muted { "(60 buckets, ending now; from the ledger's event history)" }
            }
            @for (name, title) in CHARTS {
                div.chart {
                    h2 { (title) }
                    img src=(format!("/charts/{name}.svg?period={}", period.name)) alt=(title) width="760" height="260";
                }
            }
        },
    ))
}

async fn chart_svg(
    State(console): State<Console>,
    Viewer(_): Viewer,
    Path(file): Path<String>,
    Query(query): Query<PeriodQuery>,
) -> Response {
    let Some(name) = file.strip_suffix(".svg").map(str::to_owned) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let period = Period::parse(query.period.as_deref());
    let read = console
        .read(move |c| charts::read(c.inner.opened.ledger(), period, c.inner.clock.now()))
        .await;
    match read.map(|series| charts::svg(&name, &series)) {
        Ok(Some(svg)) => ([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response(),
        Ok(None) => StatusCode::NOT_FOUND.into_response(),
        Err(err) => failed(&err),
    }
}

#[derive(Debug, Deserialize)]
struct SearchQuery {
    #[serde(default)]
    q: String,
}

async fn search(
    State(console): State<Console>,
    Viewer(identity): Viewer,
    Query(query): Query<SearchQuery>,
) -> Response {
    let q = query.q.clone();
    match console
        .read(move |c| views::search(c.inner.opened.ledger(), &q))
        .await
    {
        // One exact match: straight to it.
        Ok((found, _)) if found.len() == 1 => {
            Redirect::to(&pages::operation_href(&found[0].operation_id)).into_response()
        }
        Ok((found, all)) => render(views::search_results(
            &console.frame(&identity),
            &query.q,
            &found,
            all,
        )),
        Err(err) => failed(&err),
    }
}

async fn metrics_text(State(console): State<Console>, Viewer(_): Viewer) -> Response {
    match console
        .read(|c| crate::inspect::stats_of(c.inner.opened.ledger(), c.inner.clock.as_ref()))
        .await
    {
        Ok(stats) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            metrics::render(&stats),
        )
            .into_response(),
        Err(err) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read the ledger: {err:#}\n"),
        )
            .into_response(),
    }
}

async fn live_stream(State(console): State<Console>, Viewer(_): Viewer) -> Response {
    live::stream(&console).into_response()
}

async fn login_page(State(console): State<Console>) -> Response {
    if !console.inner.auth.has_tokens() {
        return (StatusCode::NOT_FOUND, "no token login is configured\n").into_response();
    }
    render(pages::login(None))
}

#[derive(Debug, Deserialize)]
struct LoginForm {
    #[serde(default)]
    token: String,
}

async fn login(State(console): State<Console>, Form(form): Form<LoginForm>) -> Response {
    match console.inner.auth.login(form.token.trim()) {
        Some(session) => (
            [(
                header::SET_COOKIE,
                format!("{SESSION_COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict"),
            )],
            Redirect::to("/"),
        )
            .into_response(),
        None => (
            StatusCode::UNAUTHORIZED,
            render(pages::login(Some(
                "That token is not one of the configured tokens.",
            ))),
        )
            .into_response(),
    }
}

#[derive(Debug, Deserialize)]
struct LogoutForm {
    #[serde(default)]
    csrf: Option<String>,
}

async fn logout(
    State(console): State<Console>,
    Viewer(identity): Viewer,
    Form(form): Form<LogoutForm>,
) -> Response {
    if let Via::Session(session) = &identity.via
        && console.inner.auth.csrf_ok(&identity, form.csrf.as_deref())
    {
        console.inner.auth.logout(session);
    }
    (
        [(
            header::SET_COOKIE,
            format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
        )],
        Redirect::to("/login"),
    )
        .into_response()
}

async fn asset(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "htmx.min.js" => (include_str!("assets/htmx.min.js"), "text/javascript"),
        "console.js" => (include_str!("assets/console.js"), "text/javascript"),
        "console.css" => (include_str!("assets/console.css"), "text/css"),
        _ => return StatusCode::NOT_FOUND.into_response(),
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

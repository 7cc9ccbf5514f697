//! What the observer records, and which version of the GenAI conventions it
//! follows.

/// The environment variable of the OpenTelemetry conventions' opt-in: a
/// comma-separated list; `gen_ai_latest_experimental` selects
/// [`Semconv::LatestExperimental`].
pub const SEMCONV_OPT_IN_ENV: &str = "OTEL_SEMCONV_STABILITY_OPT_IN";

/// The opt-in value for the latest experimental GenAI conventions.
pub const GEN_AI_LATEST_EXPERIMENTAL: &str = "gen_ai_latest_experimental";

/// The GenAI conventions' version the spans follow. The span is
/// `execute_tool {contract}` (kind internal) with `gen_ai.operation.name`,
/// `gen_ai.tool.name`, `gen_ai.tool.type`, `gen_ai.tool.call.id` and
/// `error.type` under both; they differ in the schema URL of the
/// instrumentation scope and in where the opt-in redacted arguments go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Semconv {
    /// The conventions as of 1.36.0, the last version before the opt-in
    /// (the default, as the conventions ask of an instrumentation): the
    /// redacted arguments, when opted in, are `effect.arguments`.
    #[default]
    V1_36,
    /// The conventions this crate pins (opentelemetry-semantic-conventions'
    /// schema, 1.42.0): the redacted arguments, when opted in, are
    /// `gen_ai.tool.call.arguments`.
    LatestExperimental,
}

impl Semconv {
    /// The schema URL of this version.
    pub fn schema_url(self) -> &'static str {
        match self {
            Semconv::V1_36 => "https://opentelemetry.io/schemas/1.36.0",
            Semconv::LatestExperimental => opentelemetry_semantic_conventions::SCHEMA_URL,
        }
    }

    /// The version an `OTEL_SEMCONV_STABILITY_OPT_IN` value selects.
    ///
    /// ```
    /// use effect_otel::Semconv;
    ///
    /// assert_eq!(Semconv::from_opt_in(None), Semconv::V1_36);
    /// assert_eq!(Semconv::from_opt_in(Some("http, gen_ai_latest_experimental")), Semconv::LatestExperimental);
    /// ```
    pub fn from_opt_in(value: Option<&str>) -> Semconv {
        let latest = value.is_some_and(|value| {
            value
                .split(',')
                .any(|item| item.trim() == GEN_AI_LATEST_EXPERIMENTAL)
        });
        if latest {
            Semconv::LatestExperimental
        } else {
            Semconv::V1_36
        }
    }
}

/// How an [`OtelObserver`](crate::OtelObserver) records effects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OtelOptions {
    /// The conventions' version (default from the environment, see
    /// [`OtelOptions::from_env`]).
    pub semconv: Semconv,
    /// Records the call's arguments, every secret and redacted path
    /// replaced by the marker, on the execution span (default off: the
    /// conventions mark arguments sensitive and opt-in). Outputs, keys and
    /// evidence are never recorded.
    pub record_redacted_arguments: bool,
}

impl OtelOptions {
    /// The defaults, with the conventions' version chosen by
    /// `OTEL_SEMCONV_STABILITY_OPT_IN`.
    pub fn from_env() -> Self {
        OtelOptions {
            semconv: Semconv::from_opt_in(std::env::var(SEMCONV_OPT_IN_ENV).ok().as_deref()),
            record_redacted_arguments: false,
        }
    }

    /// Sets the conventions' version.
    #[must_use]
    pub fn semconv(mut self, semconv: Semconv) -> Self {
        self.semconv = semconv;
        self
    }

    /// Records the redacted arguments on the execution span.
    #[must_use]
    pub fn record_redacted_arguments(mut self, record: bool) -> Self {
        self.record_redacted_arguments = record;
        self
    }
}

//! One line in `main` exports the effects' traces and metrics over OTLP/HTTP:
//! `cargo run -p examples --example otel` with a collector on
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (default `http://127.0.0.1:4318`).

fn main() -> anyhow::Result<()> {
    let endpoint = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
        .unwrap_or_else(|_| "http://127.0.0.1:4318".to_owned());
    let dir = tempfile::tempdir()?;
    let run = examples::otel::run(dir.path(), &endpoint)?;
    anyhow::ensure!(
        run.status.as_str() == "confirmed" && run.committed_payments == 1,
        "expected one confirmed capture, got {run:?}"
    );
    if run.exported {
        println!("ok: one capture; its trace and metrics were exported to {endpoint}");
    } else {
        println!("ok: one capture; no collector answered at {endpoint}, nothing was exported");
    }
    Ok(())
}

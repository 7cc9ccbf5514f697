//! `certify --url`: the effect is an HTTP request (effect-http's
//! `HttpEffect`), the probe and the count are GETs of URL templates.

use anyhow::{Context, anyhow, bail};
use effect_core::CallbackError;
use effect_http::{HttpEffect, HttpRequest};
use effect_testkit::certify::Certification;

use super::template::{Template, count_of};
use super::{Spec, refuse_key_in_count};
use crate::cli::CertifyArgs;

/// The certification of the HTTP endpoint `url`.
pub(crate) fn certification(
    args: &CertifyArgs,
    spec: &Spec,
    url: &str,
) -> anyhow::Result<Certification> {
    let http = HttpEffect::builder()
        .key_header(args.key_header.clone())
        .build()
        .context("could not build the HTTP client")?;
    let method = args.method.to_ascii_uppercase();
    if !matches!(method.as_str(), "POST" | "PUT" | "DELETE") {
        bail!("--method {} is not one of POST, PUT, DELETE", args.method);
    }
    let probe = match &args.probe_url {
        Some(template) => {
            let template = Template::url(template).map_err(|e| anyhow!("--probe-url: {e}"))?;
            Some(
                http.probe(move |args, key| {
                    Ok(HttpRequest::get(
                        template.render(args, key).map_err(CallbackError::new)?,
                    ))
                })
                .authoritative(args.probe_authoritative)
                .provider_id(|body| body["id"].as_str().map(str::to_owned))
                .into_probe(),
            )
        }
        None => None,
    };
    let contract = spec.contract(probe)?;
    let url = url.to_owned();
    let handler = http.handler(move |arguments, _context| {
        Ok(match method.as_str() {
            "PUT" => HttpRequest::put(url.clone()),
            "DELETE" => HttpRequest::delete(url.clone()),
            _ => HttpRequest::post(url.clone()),
        }
        .json(arguments))
    });
    let mut certification = spec.certification(contract, handler);
    if let Some(template) = &args.count_url {
        let template = Template::url(template).map_err(|e| anyhow!("--count-url: {e}"))?;
        refuse_key_in_count(&template, "--count-url")?;
        // A lookup that must answer 2xx: its body is the count.
        let lister = http
            .probe(move |args, _key| {
                Ok(HttpRequest::get(
                    template.render(args, None).map_err(CallbackError::new)?,
                ))
            })
            .authoritative(true);
        certification = certification.count_effects(move |arguments| {
            let answer = lister.lookup(arguments, None)?;
            let body = answer
                .output
                .ok_or("the count URL answered no body (a 404?)")?;
            Ok(count_of(&body)?)
        });
    }
    Ok(certification)
}

//! `[gateway.telemetry]` with the `OTEL_*` variables: what turns telemetry on, which wins,
//! and the errors of bad values.

use super::*;
use crate::Config;
use std::path::Path;

fn resolve(toml: &str, vars: &[(&str, &str)]) -> Result<Option<Telemetry>, String> {
    let text = format!("{toml}\n[servers.s]\ncommand = \"s\"\n");
    let env = |name: &str| {
        vars.iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| (*value).to_owned())
    };
    Config::parse(Path::new("w.toml"), &text, &env)
        .map(|config| config.gateway.telemetry)
        .map_err(|error| error.to_string())
}

#[test]
fn telemetry_is_off_unless_configured_and_off_when_the_sdk_is_disabled() {
    assert_eq!(resolve("", &[]), Ok(None));
    assert_eq!(resolve("", &[("OTEL_SERVICE_NAME", "x")]), Ok(None));
    let on = resolve("", &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")])
        .unwrap()
        .unwrap();
    assert_eq!(
        on.traces_endpoint.as_deref(),
        Some("http://c:4318/v1/traces")
    );
    assert_eq!(
        on.metrics_endpoint.as_deref(),
        Some("http://c:4318/v1/metrics")
    );
    assert_eq!(on.sampler, Sampler::ParentBased(ParentRoot::AlwaysOn));
    assert_eq!(on.service_name, "wardgate");
    assert!(!on.baggage);
    let disabled = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
        ("OTEL_SDK_DISABLED", "true"),
    ];
    assert_eq!(resolve("[gateway.telemetry]", &disabled), Ok(None));
}

#[test]
fn the_table_wins_over_the_variables_which_fill_what_it_leaves_out() {
    let vars = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
        (
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "http://env-traces:4318/t",
        ),
        ("OTEL_SERVICE_NAME", "from-env"),
        ("OTEL_RESOURCE_ATTRIBUTES", "team=a%20b,region=eu"),
        ("OTEL_TRACES_SAMPLER", "parentbased_traceidratio"),
        ("OTEL_TRACES_SAMPLER_ARG", "0.25"),
        ("OTEL_LOGS_EXPORTER", "none"),
    ];
    let from_env = resolve("", &vars).unwrap().unwrap();
    assert_eq!(
        from_env.traces_endpoint.as_deref(),
        Some("http://env-traces:4318/t")
    );
    assert_eq!(from_env.logs_endpoint, None);
    assert_eq!(from_env.service_name, "from-env");
    assert_eq!(from_env.resource["team"], "a b");
    assert_eq!(
        from_env.sampler,
        Sampler::ParentBased(ParentRoot::Ratio(0.25))
    );
    let table = "[gateway.telemetry]\nendpoint = \"http://file:4318\"\nservice_name = \"gw\"\n\
                 sampler = \"traceidratio\"\nsample_ratio = 0.01\nlogs = true\n\
                 resource_attributes = { region = \"us\" }\n";
    let both = resolve(table, &vars).unwrap().unwrap();
    assert_eq!(
        both.traces_endpoint.as_deref(),
        Some("http://file:4318/v1/traces")
    );
    assert_eq!(
        both.logs_endpoint.as_deref(),
        Some("http://file:4318/v1/logs")
    );
    assert_eq!(both.service_name, "gw");
    assert_eq!(both.resource["region"], "us");
    assert_eq!(both.resource["team"], "a b");
    assert_eq!(both.sampler, Sampler::Ratio(0.01));
}

#[test]
fn a_bad_value_is_an_error_that_names_where_it_came_from_and_the_fix() {
    let error = resolve("[gateway.telemetry]\nprotocol = \"grpc\"", &[]).unwrap_err();
    assert!(
        error.contains("gRPC") && error.contains("http/protobuf"),
        "{error}"
    );
    let error = resolve(
        "",
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_TRACES_SAMPLER_ARG", "2"),
            ("OTEL_TRACES_SAMPLER", "traceidratio"),
        ],
    )
    .unwrap_err();
    assert!(
        error.contains("OTEL_TRACES_SAMPLER_ARG") && error.contains("between 0 and 1"),
        "{error}"
    );
    let error = resolve("[gateway.telemetry]\nsampler = \"sometimes\"", &[]).unwrap_err();
    assert!(
        error.contains("sometimes") && error.contains("parentbased_always_on"),
        "{error}"
    );
    let error = resolve("[gateway.telemetry]\ntrace_url = \"http://j/trace\"", &[]).unwrap_err();
    assert!(error.contains("{trace_id}"), "{error}");
    let error = resolve("[gateway.telemetry]\nendpoint = \"collector:4318\"", &[]).unwrap_err();
    assert!(error.contains("http(s) URL"), "{error}");
    let error = resolve("[gateway.telemetry]\nsample_rate = 1", &[]).unwrap_err();
    assert!(error.contains("sample_rate"), "{error}");
}

#[test]
fn headers_are_secret_and_described_by_name_only() {
    let table = "[gateway.telemetry]\nheaders = { \"X-Api-Key\" = \"${KEY}\" }\n";
    let telemetry = resolve(table, &[("KEY", "k-93bd0e")]).unwrap().unwrap();
    assert_eq!(telemetry.headers["x-api-key"].expose(), "k-93bd0e");
    let described = telemetry.describe();
    assert!(
        described.contains("x-api-key") && !described.contains("k-93bd0e"),
        "{described}"
    );
    assert!(format!("{telemetry:?}").contains("<redacted>"));
    assert_eq!(crate::secrets::mask("key k-93bd0e"), "key ***");
}

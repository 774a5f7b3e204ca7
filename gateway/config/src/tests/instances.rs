//! `instances`: one process for every client, or one per client, and its settings.

use std::time::Duration;

use super::{assert_error, toml, toml_error};
use crate::{InstanceOwner, Instances, PerClient};

#[test]
fn a_server_is_shared_unless_it_says_per_client_and_per_client_has_defaults() {
    let config = toml(
        r#"
[gateway]
max_instances = 8

[servers.shared]
command = "a"

[servers.browser]
command = "b"
instances = "per-client"

[servers.shell]
command = "c"
instances = "per-client"
instance_owner = "identity"
max_instances = 2
instance_idle_timeout = "30s"
"#,
    )
    .unwrap();
    assert_eq!(config.gateway.max_instances, 8);
    assert_eq!(config.servers["shared"].instances, Instances::Shared);
    assert_eq!(
        config.servers["browser"].instances,
        Instances::PerClient(PerClient {
            owner: InstanceOwner::Session,
            max: 16,
            idle_timeout: Duration::from_secs(600),
        })
    );
    assert_eq!(
        config.servers["shell"].instances,
        Instances::PerClient(PerClient {
            owner: InstanceOwner::Identity,
            max: 2,
            idle_timeout: Duration::from_secs(30),
        })
    );
    let summary = config.summary();
    assert!(
        summary.contains("instances: at most 8 per-client instances of all servers at once"),
        "{summary}"
    );
    assert!(
        summary.contains(
            "instances: one per client identity (at most 2 at once, stopped after 30s unused)"
        ),
        "{summary}"
    );
}

#[test]
fn a_wrong_instances_setting_says_what_to_write() {
    let error = toml_error("[servers.s]\ncommand = \"a\"\ninstances = \"per-user\"\n");
    assert_error(
        &error,
        "servers.s.instances",
        Some(3),
        "instances \"per-user\" of server \"s\"",
        "\"per-client\"",
    );
    let error = toml_error(
        "[servers.s]\ncommand = \"a\"\ninstances = \"per-client\"\ninstance_owner = \"user\"\n",
    );
    assert_error(
        &error,
        "servers.s.instance_owner",
        Some(4),
        "\"user\"",
        "\"identity\"",
    );
    let error =
        toml_error("[servers.s]\ncommand = \"a\"\ninstances = \"per-client\"\nmax_instances = 0\n");
    assert_error(
        &error,
        "servers.s.max_instances",
        Some(4),
        "max_instances = 0",
        "1 or more",
    );
    let error = toml_error("[gateway]\nmax_instances = 0\n[servers.s]\ncommand = \"a\"\n");
    assert_error(
        &error,
        "gateway.max_instances",
        Some(2),
        "max_instances = 0",
        "1 or more",
    );
}

#[test]
fn a_per_client_setting_on_a_shared_server_is_an_error_naming_the_fix() {
    for (key, line) in [
        ("instance_owner = \"identity\"", "instance_owner"),
        ("max_instances = 3", "max_instances"),
        ("instance_idle_timeout = \"1m\"", "instance_idle_timeout"),
    ] {
        let error = toml_error(&format!("[servers.s]\ncommand = \"a\"\n{key}\n"));
        assert_error(
            &error,
            &format!("servers.s.{line}"),
            Some(3),
            "one process for every client",
            "instances = \"per-client\"",
        );
    }
}

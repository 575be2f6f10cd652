//! `capcard k8s`: the Kubernetes objects that run one experiment sharded
//! over N pods, as typed API structs ([`api`]) written as one YAML stream
//! for `kubectl apply -f`.
//!
//! Five objects, in the order they are applied:
//! - ConfigMap `<name>-experiment`: the experiment file, verbatim, mounted
//!   read-only at `/experiment` in every pod;
//! - PersistentVolumeClaim `<name>-results`: the results folder, mounted by
//!   the coordinator alone at `/results` (ReadWriteOnce is enough, and is
//!   what every storage class offers);
//! - Service `<name>-coordinator`: the stable DNS name the shards call;
//! - Job `<name>-coordinator`: one pod running `capcard run --coordinate N`,
//!   which decides every run and writes the merged folder and card;
//! - Job `<name>-shards`: an Indexed Job of N pods, all running at once,
//!   each `capcard run --shard I/N`.
//!
//! Pure: the caller reads the file ([`crate::config::load`] validates it
//! first) and writes the YAML.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use thiserror::Error;

pub mod api;

use api::{
    Affinity, Capabilities, ConfigMap, ConfigMapVolumeSource, Container, ContainerPort,
    EmptyDirVolumeSource, EnvVar, EnvVarSource, HTTPGetAction, IntOrString, Job, JobSpec,
    LabelSelector, ObjectFieldSelector, ObjectMeta, PersistentVolumeClaim,
    PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, PodAffinityTerm, PodAntiAffinity,
    PodSecurityContext, PodSpec, PodTemplateSpec, Probe, Quantity, ResourceRequirements,
    SeccompProfile, SecurityContext, Service, ServicePort, ServiceSpec, Volume, VolumeMount,
    VolumeResourceRequirements, WeightedPodAffinityTerm,
};

use crate::config::{self, ConfigError, Experiment};

/// The port the coordinator serves its plain-HTTP API on.
pub const COORDINATOR_PORT: i32 = 7300;
/// Longest `--name`: the longest suffix (`-coordinator`, 12 characters)
/// must still fit the 63 of a label value, such as the `job-name` label
/// Kubernetes puts on every pod of a Job, with room to spare.
pub const MAX_NAME_LEN: usize = 40;
pub const DEFAULT_NAMESPACE: &str = "default";
pub const DEFAULT_STORAGE: &str = "1Gi";
/// The load generator is sized for one process on two cores.
pub const DEFAULT_CPU: &str = "2";

/// Where the experiment file is mounted, and its key in the ConfigMap.
const EXPERIMENT_DIR: &str = "/experiment";
const EXPERIMENT_KEY: &str = "experiment.kdl";
const RESULTS_DIR: &str = "/results";
const WORK_DIR: &str = "/work";
const PORT_NAME: &str = "http";
/// The coordinator answers it as soon as it listens: ready means shards can join.
const READINESS_PATH: &str = "/v1/clock";
/// Filled in from the downward API; `$(JOB_COMPLETION_INDEX)` in the shard's
/// arguments is expanded by the kubelet.
const INDEX_ENV: &str = "JOB_COMPLETION_INDEX";
const INDEX_FIELD_PATH: &str = "metadata.annotations['batch.kubernetes.io/job-completion-index']";
/// The group of the image's `capcard` user (see the Dockerfile): as the
/// pods' fsGroup it makes the results volume writable by that user, which
/// a fresh volume, owned by root, is not.
const FS_GROUP: i64 = 10001;

/// What `capcard k8s` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct K8sOptions {
    /// Shard pods, all running at once (≥ 1).
    pub shards: u32,
    /// Container image with `capcard` on its PATH.
    pub image: String,
    pub namespace: String,
    /// Prefix of every object's name; `None`: [`default_name`] of the experiment's name.
    pub name: Option<String>,
    /// Size of the results volume, a Kubernetes quantity (`1Gi`).
    pub storage: String,
    /// CPU request of each shard, a Kubernetes quantity (`2`, `1500m`).
    pub cpu: String,
}

impl K8sOptions {
    /// `shards` pods of `image`, every other option at its default.
    pub fn new(shards: u32, image: impl Into<String>) -> Self {
        K8sOptions {
            shards,
            image: image.into(),
            namespace: DEFAULT_NAMESPACE.to_string(),
            name: None,
            storage: DEFAULT_STORAGE.to_string(),
            cpu: DEFAULT_CPU.to_string(),
        }
    }
}

/// The objects of one sharded run, in the order [`to_yaml`] writes them.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifests {
    pub experiment: ConfigMap,
    pub results: PersistentVolumeClaim,
    pub coordinator_service: Service,
    pub coordinator: Job,
    pub shards: Job,
}

#[derive(Debug, Error, miette::Diagnostic)]
pub enum K8sError {
    #[error(transparent)]
    #[diagnostic(transparent)]
    Config(#[from] Box<ConfigError>),
    #[error(
        "the experiment reads {} beside it, which the pods do not have: {}",
        if .files.len() == 1 { "a file" } else { "files" },
        .files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", ")
    )]
    #[diagnostic(
        code(capcard::k8s::data_files),
        help(
            "only the experiment file goes into the ConfigMap; put the data files into the image and name them by absolute path"
        )
    )]
    DataFiles { files: Vec<PathBuf> },
    #[error(
        "target `{target}` is a `sim`, started inside each pod: the shards would load as many \
         separate simulators, not one server"
    )]
    #[diagnostic(
        code(capcard::k8s::sim_target),
        help(
            "serve the engine once (a Deployment running `capcard sim --listen 0.0.0.0:8000`, or \
             the real server) and point an `endpoint` target at its Service"
        )
    )]
    SimTarget { target: String },
    #[error("cannot write the manifests as YAML: {0}")]
    #[diagnostic(code(capcard::k8s::yaml))]
    Yaml(#[from] serde_yaml_ng::Error),
}

/// The manifests for the experiment file `source` (at `path`, for
/// diagnostics), refused when it names data files by relative path: they
/// would be looked for beside the mounted experiment, where there is only it.
pub fn for_experiment(
    source: &str,
    path: &Path,
    options: &K8sOptions,
) -> Result<Manifests, K8sError> {
    // Parsed without its data, the paths are as written, not yet resolved.
    let experiment = config::parse(source, path).map_err(Box::new)?;
    let files: Vec<PathBuf> = relative_data_files(&experiment)
        .into_iter()
        .map(Path::to_path_buf)
        .collect();
    if !files.is_empty() {
        return Err(K8sError::DataFiles { files });
    }
    if let Some(sim) = experiment
        .targets
        .iter()
        .find(|t| matches!(t.kind, config::TargetKind::Sim { .. }))
    {
        return Err(K8sError::SimTarget {
            target: sim.name.clone(),
        });
    }
    Ok(manifests(source, &experiment.name, options))
}

/// The datasets, traces and tokenizers an experiment names by relative
/// path: on an experiment from [`config::parse`], whose paths are as written.
pub fn relative_data_files(experiment: &Experiment) -> Vec<&Path> {
    let datasets = experiment
        .workloads
        .iter()
        .filter_map(|w| w.dataset.as_ref().map(|d| d.path.as_path()));
    let tokenizers = experiment
        .targets
        .iter()
        .filter_map(|t| t.tokenizer.as_ref().map(|t| t.path.as_path()));
    let traces = experiment
        .open
        .iter()
        .filter_map(|o| o.trace.as_ref().map(|t| t.path.as_path()));
    datasets
        .chain(tokenizers)
        .chain(traces)
        .filter(|p| p.is_relative())
        .collect()
}

/// The five objects running `source` (the experiment file, verbatim) as
/// `options.shards` shards and their coordinator.
pub fn manifests(source: &str, experiment_name: &str, options: &K8sOptions) -> Manifests {
    let name = options
        .name
        .clone()
        .unwrap_or_else(|| default_name(experiment_name));
    let names = Names::new(&name);
    let ns = options.namespace.as_str();
    Manifests {
        experiment: ConfigMap {
            metadata: metadata(&names.experiment, ns, &name, "experiment"),
            data: Some(BTreeMap::from([(
                EXPERIMENT_KEY.to_string(),
                source.to_string(),
            )])),
            ..Default::default()
        },
        results: PersistentVolumeClaim {
            metadata: metadata(&names.results, ns, &name, "results"),
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".to_string()]),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_string(),
                        Quantity(options.storage.clone()),
                    )])),
                }),
            }),
            ..Default::default()
        },
        coordinator_service: Service {
            metadata: metadata(&names.coordinator, ns, &name, "coordinator"),
            spec: Some(ServiceSpec {
                type_: Some("ClusterIP".to_string()),
                selector: Some(selector_labels(&name, "coordinator")),
                ports: Some(vec![ServicePort {
                    name: Some(PORT_NAME.to_string()),
                    port: COORDINATOR_PORT,
                    target_port: Some(IntOrString::String(PORT_NAME.to_string())),
                    protocol: Some("TCP".to_string()),
                }]),
            }),
            ..Default::default()
        },
        coordinator: coordinator_job(&names, ns, &name, options),
        shards: shards_job(&names, ns, &name, options),
    }
}

/// `manifests` as a multi-document YAML stream, each object after a `---`.
pub fn to_yaml(manifests: &Manifests) -> Result<String, K8sError> {
    let documents = [
        serde_yaml_ng::to_string(&manifests.experiment)?,
        serde_yaml_ng::to_string(&manifests.results)?,
        serde_yaml_ng::to_string(&manifests.coordinator_service)?,
        serde_yaml_ng::to_string(&manifests.coordinator)?,
        serde_yaml_ng::to_string(&manifests.shards)?,
    ];
    Ok(documents
        .iter()
        .map(|document| format!("---\n{document}"))
        .collect())
}

/// An experiment's name as the prefix of object names: a DNS-1035 label
/// (lower-case letters, digits and `-`, starting with a letter, as Service
/// names must) of at most [`MAX_NAME_LEN`] characters.
pub fn default_name(experiment_name: &str) -> String {
    let mut name = String::new();
    for c in experiment_name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            name.push(c);
        } else if !name.is_empty() && !name.ends_with('-') {
            name.push('-');
        }
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name.insert_str(0, "capcard-");
    }
    // ASCII only by now: truncating at a byte is at a character.
    name.truncate(MAX_NAME_LEN);
    while name.ends_with('-') {
        name.pop();
    }
    name
}

/// `--name`: a DNS-1035 label of at most [`MAX_NAME_LEN`] characters.
pub fn check_name(text: &str) -> Result<(), String> {
    check_label(text, MAX_NAME_LEN)?;
    if !text.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err("must start with a lower-case letter (Service names must)".to_string());
    }
    Ok(())
}

/// `--namespace`: a DNS-1123 label, at most 63 characters.
pub fn check_namespace(text: &str) -> Result<(), String> {
    check_label(text, 63)
}

fn check_label(text: &str, max_len: usize) -> Result<(), String> {
    if text.is_empty() || text.len() > max_len {
        return Err(format!("must be 1 to {max_len} characters long"));
    }
    if !text
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err("may hold only lower-case letters, digits and `-`".to_string());
    }
    if text.starts_with('-') || text.ends_with('-') {
        return Err("must start and end with a letter or digit".to_string());
    }
    Ok(())
}

/// `--storage`, `--cpu`: a positive Kubernetes quantity (`1Gi`, `500m`,
/// `1.5`, `2e3`), so a typo is caught here rather than by the API server.
pub fn check_quantity(text: &str) -> Result<(), String> {
    let problem = || {
        format!(
            "`{text}` is not a Kubernetes quantity: a positive number with an optional suffix (m, k, M, G, T, Ki, Mi, Gi, Ti, ...), e.g. 1Gi, 500m"
        )
    };
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let digits = number.chars().filter(char::is_ascii_digit).count();
    if digits == 0 || number.matches('.').count() > 1 {
        return Err(problem());
    }
    let suffix_ok = match suffix {
        "" | "m" | "k" | "M" | "G" | "T" | "P" | "E" => true,
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => true,
        _ => suffix
            .strip_prefix(['e', 'E'])
            .map(|exponent| exponent.strip_prefix(['+', '-']).unwrap_or(exponent))
            .is_some_and(|e| !e.is_empty() && e.chars().all(|c| c.is_ascii_digit())),
    };
    if !suffix_ok {
        return Err(problem());
    }
    if !number.chars().any(|c| c.is_ascii_digit() && c != '0') {
        return Err(format!("`{text}` must be more than zero"));
    }
    Ok(())
}

/// The objects' names, from their common prefix.
struct Names {
    experiment: String,
    results: String,
    /// Of both the coordinator's Job and its Service.
    coordinator: String,
    shards: String,
}

impl Names {
    fn new(name: &str) -> Self {
        Names {
            experiment: format!("{name}-experiment"),
            results: format!("{name}-results"),
            coordinator: format!("{name}-coordinator"),
            shards: format!("{name}-shards"),
        }
    }
}

/// The labels that tell one run's pods apart: what selectors match on.
fn selector_labels(instance: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "capcard".to_string()),
        (
            "app.kubernetes.io/instance".to_string(),
            instance.to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            component.to_string(),
        ),
    ])
}

fn labels(instance: &str, component: &str) -> BTreeMap<String, String> {
    let mut labels = selector_labels(instance, component);
    labels.insert(
        "app.kubernetes.io/managed-by".to_string(),
        "capcard".to_string(),
    );
    labels
}

fn metadata(name: &str, namespace: &str, instance: &str, component: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        labels: Some(labels(instance, component)),
    }
}

fn coordinator_job(names: &Names, ns: &str, instance: &str, options: &K8sOptions) -> Job {
    let args = vec![
        "run".to_string(),
        format!("{EXPERIMENT_DIR}/{EXPERIMENT_KEY}"),
        "--coordinate".to_string(),
        options.shards.to_string(),
        "--listen".to_string(),
        format!("0.0.0.0:{COORDINATOR_PORT}"),
        "--out".to_string(),
        format!("{RESULTS_DIR}/{instance}"),
        "--quiet".to_string(),
    ];
    let container = Container {
        name: "coordinator".to_string(),
        ports: Some(vec![ContainerPort {
            name: Some(PORT_NAME.to_string()),
            container_port: COORDINATOR_PORT,
            protocol: Some("TCP".to_string()),
        }]),
        // The Service sends shards to the pod only once it answers; a short
        // period, as every shard waits for it before the first run.
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some(READINESS_PATH.to_string()),
                port: IntOrString::String(PORT_NAME.to_string()),
            }),
            period_seconds: Some(2),
        }),
        volume_mounts: Some(vec![
            experiment_mount(),
            VolumeMount {
                name: "results".to_string(),
                mount_path: RESULTS_DIR.to_string(),
                ..Default::default()
            },
        ]),
        ..container(&options.image, args)
    };
    let volumes = vec![
        experiment_volume(names),
        Volume {
            name: "results".to_string(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: names.results.clone(),
            }),
            ..Default::default()
        },
    ];
    Job {
        metadata: metadata(&names.coordinator, ns, instance, "coordinator"),
        spec: Some(JobSpec {
            completions: Some(1),
            parallelism: Some(1),
            // A second coordinator would start the experiment over while
            // the shards still follow the first: fail, and say so.
            backoff_limit: Some(0),
            template: pod_template(instance, "coordinator", container, volumes, None),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn shards_job(names: &Names, ns: &str, instance: &str, options: &K8sOptions) -> Job {
    let shards = i32::try_from(options.shards).unwrap_or(i32::MAX);
    let args = vec![
        "run".to_string(),
        format!("{EXPERIMENT_DIR}/{EXPERIMENT_KEY}"),
        "--shard".to_string(),
        format!("$({INDEX_ENV})/{}", options.shards),
        "--coordinator".to_string(),
        format!("http://{}.{ns}.svc:{COORDINATOR_PORT}", names.coordinator),
        "--out".to_string(),
        format!("{WORK_DIR}/shard-$({INDEX_ENV})"),
        "--quiet".to_string(),
    ];
    let container = Container {
        name: "shard".to_string(),
        env: Some(vec![EnvVar {
            name: INDEX_ENV.to_string(),
            value_from: Some(EnvVarSource {
                field_ref: Some(ObjectFieldSelector {
                    field_path: INDEX_FIELD_PATH.to_string(),
                }),
            }),
            ..Default::default()
        }]),
        // A request and no limit: the CPU is there when the generator needs
        // it, and CFS throttling would show up as latency of the server.
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([(
                "cpu".to_string(),
                Quantity(options.cpu.clone()),
            )])),
            ..Default::default()
        }),
        volume_mounts: Some(vec![
            experiment_mount(),
            VolumeMount {
                name: "work".to_string(),
                mount_path: WORK_DIR.to_string(),
                ..Default::default()
            },
        ]),
        ..container(&options.image, args)
    };
    let volumes = vec![
        experiment_volume(names),
        Volume {
            name: "work".to_string(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
    ];
    // Two shards on one node share its CPU and network: preferred, not
    // required, so a small cluster still runs the experiment.
    let spread = Affinity {
        pod_anti_affinity: Some(PodAntiAffinity {
            preferred_during_scheduling_ignored_during_execution: Some(vec![
                WeightedPodAffinityTerm {
                    weight: 100,
                    pod_affinity_term: PodAffinityTerm {
                        label_selector: Some(LabelSelector {
                            match_labels: Some(selector_labels(instance, "shard")),
                        }),
                        topology_key: "kubernetes.io/hostname".to_string(),
                    },
                },
            ]),
        }),
    };
    Job {
        metadata: metadata(&names.shards, ns, instance, "shard"),
        spec: Some(JobSpec {
            completion_mode: Some("Indexed".to_string()),
            completions: Some(shards),
            // Every shard starts each run at the same instant: all of them
            // run at once, or the experiment cannot.
            parallelism: Some(shards),
            // A lost shard fails the Job visibly: the coordinator marks the
            // run incomplete, rather than a retried pod joining halfway.
            backoff_limit: Some(0),
            template: pod_template(instance, "shard", container, volumes, Some(spread)),
        }),
        ..Default::default()
    }
}

/// What both containers share: the image, `capcard` by name (not the
/// image's entrypoint, so any image with it on the PATH serves), and the
/// settings of the "restricted" Pod Security Standard.
fn container(image: &str, args: Vec<String>) -> Container {
    Container {
        image: Some(image.to_string()),
        command: Some(vec!["capcard".to_string()]),
        args: Some(args),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_string()]),
            }),
        }),
        ..Default::default()
    }
}

fn pod_template(
    instance: &str,
    component: &str,
    container: Container,
    volumes: Vec<Volume>,
    affinity: Option<Affinity>,
) -> PodTemplateSpec {
    PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels(instance, component)),
            ..Default::default()
        }),
        spec: Some(PodSpec {
            // A restarted container would rejoin a run already under way.
            restart_policy: Some("Never".to_string()),
            containers: vec![container],
            volumes: Some(volumes),
            affinity,
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                fs_group: Some(FS_GROUP),
                seccomp_profile: Some(SeccompProfile {
                    type_: "RuntimeDefault".to_string(),
                }),
            }),
        }),
    }
}

fn experiment_mount() -> VolumeMount {
    VolumeMount {
        name: "experiment".to_string(),
        mount_path: EXPERIMENT_DIR.to_string(),
        read_only: Some(true),
    }
}

fn experiment_volume(names: &Names) -> Volume {
    Volume {
        name: "experiment".to_string(),
        config_map: Some(ConfigMapVolumeSource {
            name: names.experiment.clone(),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use serde::Deserialize;

    use super::*;

    const QUICKSTART: &str = include_str!("../../experiments/quickstart.kdl");

    /// The five objects read back from `yaml`, typed: each document must be
    /// the kind (apiVersion and kind are checked) at its place.
    fn read_back(yaml: &str) -> Manifests {
        let mut documents = serde_yaml_ng::Deserializer::from_str(yaml);
        let mut next = || documents.next().expect("five documents");
        let manifests = Manifests {
            experiment: ConfigMap::deserialize(next()).expect("1st: a ConfigMap"),
            results: PersistentVolumeClaim::deserialize(next()).expect("2nd: a PVC"),
            coordinator_service: Service::deserialize(next()).expect("3rd: a Service"),
            coordinator: Job::deserialize(next()).expect("4th: a Job"),
            shards: Job::deserialize(next()).expect("5th: a Job"),
        };
        assert!(documents.next().is_none(), "no sixth document");
        manifests
    }

    fn generated(shards: u32) -> Manifests {
        let mut options = K8sOptions::new(shards, "ghcr.io/example/capcard:0.1");
        options.namespace = "bench".to_string();
        let yaml = to_yaml(&manifests(QUICKSTART, "quickstart", &options)).expect("YAML");
        read_back(&yaml)
    }

    fn pod_spec(job: &Job) -> &PodSpec {
        job.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
    }

    fn only_container(job: &Job) -> &Container {
        let containers = &pod_spec(job).containers;
        assert_eq!(containers.len(), 1);
        &containers[0]
    }

    fn args(job: &Job) -> &[String] {
        only_container(job).args.as_deref().unwrap()
    }

    /// The argument after `flag`.
    fn flag<'a>(args: &'a [String], flag: &str) -> &'a str {
        let at = args.iter().position(|a| a == flag).expect(flag);
        &args[at + 1]
    }

    #[test]
    fn the_yaml_reads_back_into_the_same_typed_objects_in_order() {
        let options = K8sOptions::new(3, "ghcr.io/example/capcard:0.1");
        let built = manifests(QUICKSTART, "quickstart", &options);
        let yaml = to_yaml(&built).unwrap();
        assert!(yaml.starts_with("---\n"), "{yaml}");
        assert_eq!(read_back(&yaml), built);
        assert_eq!(
            built.coordinator.metadata.name.as_deref(),
            Some("quickstart-coordinator")
        );
        assert_eq!(
            built.shards.metadata.name.as_deref(),
            Some("quickstart-shards")
        );
    }

    #[test]
    fn the_shards_are_one_indexed_job_all_at_once_never_retried() {
        for n in [1, 3, 16] {
            let shards = generated(n).shards;
            let spec = shards.spec.as_ref().unwrap();
            assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
            assert_eq!(spec.completions, Some(n as i32));
            assert_eq!(spec.parallelism, Some(n as i32));
            assert_eq!(spec.backoff_limit, Some(0));
            assert_eq!(pod_spec(&shards).restart_policy.as_deref(), Some("Never"));
            let args = args(&shards);
            assert_eq!(&args[..2], ["run", "/experiment/experiment.kdl"]);
            assert_eq!(
                flag(args, "--shard"),
                format!("$(JOB_COMPLETION_INDEX)/{n}")
            );
            assert_eq!(flag(args, "--out"), "/work/shard-$(JOB_COMPLETION_INDEX)");
            assert!(args.contains(&"--quiet".to_string()));
        }
    }

    #[test]
    fn the_index_comes_from_the_downward_api() {
        let shards = generated(3).shards;
        let env = only_container(&shards).env.as_deref().unwrap();
        let index = env
            .iter()
            .find(|e| e.name == "JOB_COMPLETION_INDEX")
            .expect("the variable the arguments name");
        let field = index
            .value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap();
        assert_eq!(
            field.field_path,
            "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        );
        assert!(index.value.is_none());
    }

    #[test]
    fn shards_call_the_coordinator_by_its_service_name_and_port() {
        let m = generated(3);
        let service = &m.coordinator_service;
        let port = &service.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
        let url = format!(
            "http://{}.{}.svc:{}",
            service.metadata.name.as_deref().unwrap(),
            service.metadata.namespace.as_deref().unwrap(),
            port.port
        );
        assert_eq!(url, "http://quickstart-coordinator.bench.svc:7300");
        assert_eq!(flag(args(&m.shards), "--coordinator"), url);
        // ...and the Service forwards to the port the coordinator listens on.
        let coordinator = only_container(&m.coordinator);
        let IntOrString::String(target) = port.target_port.as_ref().unwrap() else {
            panic!("a named target port");
        };
        let listening = coordinator
            .ports
            .as_deref()
            .unwrap()
            .iter()
            .find(|p| p.name.as_ref() == Some(target))
            .expect("the target port is the coordinator's");
        assert_eq!(listening.container_port, port.port);
        let args = args(&m.coordinator);
        assert_eq!(flag(args, "--listen"), format!("0.0.0.0:{}", port.port));
        assert_eq!(flag(args, "--coordinate"), "3");
        assert_eq!(flag(args, "--out"), "/results/quickstart");
        let probe = coordinator.readiness_probe.as_ref().unwrap();
        let get = probe.http_get.as_ref().unwrap();
        assert_eq!(get.path.as_deref(), Some("/v1/clock"));
        assert_eq!(get.port, IntOrString::String(target.clone()));
    }

    #[test]
    fn the_coordinator_is_one_pod_never_retried() {
        let coordinator = generated(3).coordinator;
        let spec = coordinator.spec.as_ref().unwrap();
        assert_eq!((spec.completions, spec.parallelism), (Some(1), Some(1)));
        assert_eq!(spec.backoff_limit, Some(0));
        assert_eq!(
            pod_spec(&coordinator).restart_policy.as_deref(),
            Some("Never")
        );
    }

    #[test]
    fn the_config_map_holds_the_file_byte_for_byte() {
        // What YAML quotes, folds or trims: trailing blanks, tabs, a
        // document marker, quotes, no final newline.
        let tricky = "experiment \"a: b\" {  \n\tseed 1\n}\n---\n# not a comment\n\n\n  // x — ✓ 'q' \"dq\" \\n";
        let options = K8sOptions::new(2, "capcard");
        for source in [QUICKSTART, tricky, ""] {
            let yaml = to_yaml(&manifests(source, "x", &options)).unwrap();
            let data = read_back(&yaml).experiment.data.unwrap();
            assert_eq!(data.len(), 1);
            assert_eq!(data["experiment.kdl"].as_bytes(), source.as_bytes());
        }
    }

    #[test]
    fn the_service_selects_the_coordinator_pod_and_no_shard() {
        let m = generated(3);
        let selector = m.coordinator_service.spec.unwrap().selector.unwrap();
        assert!(!selector.is_empty());
        let pod_labels = |job: &Job| {
            job.spec
                .as_ref()
                .unwrap()
                .template
                .metadata
                .as_ref()
                .unwrap()
                .labels
                .clone()
                .unwrap()
        };
        let matches = |labels: &BTreeMap<String, String>| {
            selector.iter().all(|(k, v)| labels.get(k) == Some(v))
        };
        assert!(matches(&pod_labels(&m.coordinator)), "{selector:?}");
        assert!(!matches(&pod_labels(&m.shards)), "{selector:?}");
        // The shards' anti-affinity matches the shards themselves.
        let anti = pod_spec(&m.shards).affinity.as_ref().unwrap();
        let terms = anti
            .pod_anti_affinity
            .as_ref()
            .unwrap()
            .preferred_during_scheduling_ignored_during_execution
            .as_ref()
            .unwrap();
        assert_eq!(terms.len(), 1);
        let term = &terms[0].pod_affinity_term;
        assert_eq!(term.topology_key, "kubernetes.io/hostname");
        let spread = term
            .label_selector
            .as_ref()
            .unwrap()
            .match_labels
            .as_ref()
            .unwrap();
        let shard_labels = pod_labels(&m.shards);
        assert!(spread.iter().all(|(k, v)| shard_labels.get(k) == Some(v)));
        assert!(
            pod_spec(&m.coordinator).affinity.is_none(),
            "the coordinator may share a node"
        );
    }

    #[test]
    fn every_mount_has_a_volume_and_every_volume_its_object() {
        let m = generated(3);
        for job in [&m.coordinator, &m.shards] {
            let volumes: BTreeSet<&str> = pod_spec(job)
                .volumes
                .as_deref()
                .unwrap()
                .iter()
                .map(|v| v.name.as_str())
                .collect();
            for mount in only_container(job).volume_mounts.as_deref().unwrap() {
                assert!(volumes.contains(mount.name.as_str()), "{}", mount.name);
            }
            for volume in pod_spec(job).volumes.as_deref().unwrap() {
                if let Some(config_map) = &volume.config_map {
                    assert_eq!(Some(&config_map.name), m.experiment.metadata.name.as_ref());
                }
                if let Some(claim) = &volume.persistent_volume_claim {
                    assert_eq!(Some(&claim.claim_name), m.results.metadata.name.as_ref());
                }
            }
        }
        let mounts = |job: &Job| -> BTreeMap<String, String> {
            only_container(job)
                .volume_mounts
                .as_deref()
                .unwrap()
                .iter()
                .map(|v| (v.mount_path.clone(), v.name.clone()))
                .collect()
        };
        let coordinator = mounts(&m.coordinator);
        assert_eq!(coordinator["/experiment"], "experiment");
        assert_eq!(coordinator["/results"], "results");
        let shards = mounts(&m.shards);
        assert_eq!(shards["/experiment"], "experiment");
        assert_eq!(shards["/work"], "work");
        assert!(
            !shards.contains_key("/results"),
            "only the coordinator mounts the PVC"
        );
        let work = pod_spec(&m.shards).volumes.as_deref().unwrap();
        assert!(
            work.iter()
                .any(|v| v.name == "work" && v.empty_dir.is_some())
        );
    }

    #[test]
    fn every_object_is_in_the_namespace_and_labelled() {
        let m = generated(3);
        let all = [
            ("ConfigMap", &m.experiment.metadata),
            ("PVC", &m.results.metadata),
            ("Service", &m.coordinator_service.metadata),
            ("coordinator Job", &m.coordinator.metadata),
            ("shards Job", &m.shards.metadata),
        ];
        for (what, metadata) in all {
            assert_eq!(metadata.namespace.as_deref(), Some("bench"), "{what}");
            let labels = metadata.labels.as_ref().unwrap();
            assert_eq!(labels["app.kubernetes.io/name"], "capcard", "{what}");
            assert_eq!(labels["app.kubernetes.io/instance"], "quickstart", "{what}");
            assert_eq!(labels["app.kubernetes.io/managed-by"], "capcard", "{what}");
            assert!(labels.contains_key("app.kubernetes.io/component"), "{what}");
            let name = metadata.name.as_deref().unwrap();
            assert!(name.len() <= 63 && check_namespace(name).is_ok(), "{name}");
        }
    }

    #[test]
    fn the_options_land_where_they_belong() {
        let options = K8sOptions {
            name: Some("gpu-a".to_string()),
            storage: "20Gi".to_string(),
            cpu: "3500m".to_string(),
            ..K8sOptions::new(4, "registry.local/capcard@sha256:abc")
        };
        let m = manifests(QUICKSTART, "quickstart", &options);
        assert_eq!(m.results.metadata.name.as_deref(), Some("gpu-a-results"));
        let requests = |spec: &Option<PersistentVolumeClaimSpec>| {
            spec.as_ref()
                .unwrap()
                .resources
                .as_ref()
                .unwrap()
                .requests
                .clone()
                .unwrap()
        };
        assert_eq!(
            requests(&m.results.spec)["storage"],
            Quantity("20Gi".into())
        );
        let access = m.results.spec.as_ref().unwrap().access_modes.clone();
        assert_eq!(access, Some(vec!["ReadWriteOnce".to_string()]));
        let shard = only_container(&m.shards);
        let cpu = &shard.resources.as_ref().unwrap().requests.as_ref().unwrap()["cpu"];
        assert_eq!(cpu, &Quantity("3500m".into()));
        assert!(shard.resources.as_ref().unwrap().limits.is_none());
        for job in [&m.coordinator, &m.shards] {
            let container = only_container(job);
            assert_eq!(
                container.image.as_deref(),
                Some("registry.local/capcard@sha256:abc")
            );
            assert_eq!(container.image_pull_policy, None);
            assert_eq!(container.command, Some(vec!["capcard".to_string()]));
        }
        assert_eq!(flag(args(&m.coordinator), "--out"), "/results/gpu-a");
        assert_eq!(
            flag(args(&m.shards), "--coordinator"),
            "http://gpu-a-coordinator.default.svc:7300"
        );
    }

    #[test]
    fn default_names_are_dns_labels_that_leave_room_for_suffixes() {
        let cases = [
            ("quickstart", "quickstart"),
            ("Support Chat_v2", "support-chat-v2"),
            ("dataset-replay", "dataset-replay"),
            ("--a--b--", "a-b"),
            ("2024 run", "capcard-2024-run"),
            ("Größe", "gr-e"),
            ("", "capcard"),
            ("___", "capcard"),
        ];
        for (experiment, expected) in cases {
            assert_eq!(default_name(experiment), expected, "{experiment:?}");
        }
        let long = default_name(&"a-very-long-experiment-name ".repeat(4));
        assert!(long.len() <= MAX_NAME_LEN && !long.ends_with('-'), "{long}");
        for (experiment, _) in cases {
            let name = default_name(experiment);
            assert_eq!(check_name(&name), Ok(()), "{name}");
        }
    }

    #[test]
    fn names_namespaces_and_quantities_are_checked() {
        assert!(check_name("ok-1").is_ok());
        for bad in ["", "Upper", "1st", "trailing-", "dot.ted", &"a".repeat(41)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_namespace("1st-team").is_ok());
        assert!(check_namespace("kube_system").is_err());
        for good in ["1Gi", "2", "500m", "1.5", "0.5Ti", "2e3", "1E+2", "10k"] {
            assert_eq!(check_quantity(good), Ok(()), "{good}");
        }
        for bad in [
            "", "Gi", "1GB", "1.2.3", "-1", "0", "0.0Gi", "1 Gi", "2e", "1iG",
        ] {
            assert!(check_quantity(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn experiments_reading_files_beside_them_are_refused() {
        let options = K8sOptions::new(2, "capcard");
        // The shipped files serve `sim tiny` in process, which is refused
        // (one simulator per pod); as served engines they are not.
        let served = |text: &str| text.replace("    sim tiny", "    endpoint \"http://e:8000/v1\"");
        let sim = for_experiment(QUICKSTART, Path::new("q.kdl"), &options).unwrap_err();
        assert!(
            matches!(&sim, K8sError::SimTarget { target } if target == "tiny"),
            "{sim}"
        );
        let dataset = &served(include_str!("../../experiments/dataset.kdl"));
        let error = for_experiment(dataset, Path::new("experiments/dataset.kdl"), &options)
            .expect_err("its dataset would not be in the pod");
        let K8sError::DataFiles { files } = &error else {
            panic!("{error}");
        };
        assert_eq!(files, &[PathBuf::from("data/support-prompts.jsonl")]);
        assert!(error.to_string().contains("data/support-prompts.jsonl"));
        // An absolute path may be in the image: not refused.
        let absolute = dataset.replace("\"data/support-prompts.jsonl\"", "\"/data/prompts.jsonl\"");
        assert!(for_experiment(&absolute, Path::new("x.kdl"), &options).is_ok());
        let quickstart = served(QUICKSTART);
        let built = for_experiment(&quickstart, Path::new("q.kdl"), &options).unwrap();
        assert_eq!(built, manifests(&quickstart, "quickstart", &options));
    }
}

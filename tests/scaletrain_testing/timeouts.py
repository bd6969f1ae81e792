"""How long the tests wait, in seconds, each timeout named for what it waits for. A timeout only decides how
soon a failing test fails: a passing one goes on once what it waits for has happened. So each is generous:
the machine is shared, with the other tiers' tests among others.

Durations that the tests configure into what they test (a job's hangTimeoutSeconds, the kubelet stand-in's
heartbeat) are not here: they stay with what they configure."""

# ---- the control plane ----

# One request to a component's readiness endpoint, on loopback: answered within milliseconds, or retried.
READINESS_REQUEST_S = 5.0
# A component from its start to ready: seconds for etcd and the API server's post-start hooks, more when
# other tests load the machine.
COMPONENT_READY_S = 60.0
# A component's exit after SIGTERM (and again after SIGKILL): the API server drains its requests first.
COMPONENT_STOP_S = 20.0
# One request of the tests' client to the API server: a loaded server answers within a second or two; a
# stuck connection fails the test instead of hanging it.
API_REQUEST_S = 15.0
# The control plane's controllers acting on a change (the Job controller creating pods, the scheduler
# binding them, the garbage collector deleting children, a claim bound, a quota counted, a namespace's
# ServiceAccount, a Service's EndpointSlice): within a second or two, ten on a loaded machine.
CONTROLLERS_REACTION_S = 30.0
# An RBAC change, or a namespace's PodSecurity label, reaching the authorizer or the admission plugin
# through their informers: within moments.
POLICY_PROPAGATION_S = 10
# The API server calling a webhook just registered: its informer picks the registration up.
WEBHOOK_ARMED_S = 30.0
# Kueue's manager from its start to ready (kueue.py): its informers synced and its webhook server listening.
KUEUE_READY_S = 60.0
# Kueue reacting to a change (a job to queue, quota freed): its Workload made, admitted or left pending, the job
# unsuspended; within a second or two.
KUEUE_REACTION_S = 30.0
# A deleted job's quota back in its ClusterQueue: the garbage collector deletes the job's Workload (Kueue relies on
# its owner reference), within seconds; but it learns of a newly installed CRD's kind only at its discovery resync,
# every 30 s, so in the first 30 s of a fresh control plane with Kueue it can take that long.
KUEUE_QUOTA_RELEASE_S = 60.0


# ---- the operator ----

# The operator's reaction to a change (a submitted job, a pod's new phase), through its watches: a
# reconcile pass or a few.
OPERATOR_REACTION_S = 30.0
# The operator reporting a gang Running with that gang's progress after a disturbance (a new operator
# process after a kill, or an outage of its status writes): its start and listing, then a few passes.
OPERATOR_TAKEOVER_S = 30.0
# The operator's /healthz answering once it reconciles jobs: kopf serves it from its start.
OPERATOR_LIVENESS_S = 10
# The operator's exit after SIGTERM: kopf ends its handlers and leaves the peering first.
OPERATOR_STOP_S = 20
# A standby replica taking over from one that died: its peering record's lifetime (60 s, peering.py), then a
# housekeeping pass.
PEERING_EXPIRY_S = 120.0
# The operator sending a request that a fault-proxy rule waits for: its reaction to a change, after retries
# with backoff where the proxy failed earlier requests.
PROXIED_REQUEST_S = 60.0

# ---- pods ----

# A pod of the pod executor starting its processes (Python's start-up, on a loaded machine).
POD_START_S = 60
# A small pod scheduled (where there is a scheduler), started and run to its end.
POD_RUN_S = 60.0
# A deleted or suspended job's pods gone: the garbage collector or the Job controller deletes them, and the
# kubelet stand-in stops their processes within their grace period.
GANG_TEARDOWN_S = 60

# ---- a real node (local_cluster.py) ----

# The kubelet registering its node and reporting it Ready: its start, the runtime's status, the first
# pod network (CNI) check.
CLUSTER_NODE_READY_S = 120
# A deleted pod's containers stopped and its sandbox (network namespace, veth) torn down by the kubelet.
CLUSTER_POD_TEARDOWN_S = 60
# A built image into the node's containerd: the 5.6 GB trainer, pushed by buildah and unpacked, takes about
# 2 minutes on 2 CPUs.
IMAGE_IMPORT_S = 900
# A pod of a built image Running: the sandbox, the container's start (a multi-GB image is already
# unpacked), its readiness probe.
CLUSTER_POD_READY_S = 180

# ---- the trainer and whole jobs ----

# A paced trainer pod (the launcher over torchrun, 2 workers) logging the steps a test waits for: start-up
# takes most of it.
TRAINER_STEPS_S = 120
# A paced trainer pod under CPU load, from a SIGTERM to one of its workers until every process of it is gone:
# the rest of its start-up when the signal came right after a worker's, then a step and a checkpoint save.
LOADED_POD_STOP_S = 120
# The pod launcher's torchrun over 2 workers, up to a worker's crash in its first steps.
POD_LAUNCHER_RUN_S = 180
# One tiny trainer run to its end, under torchrun for several processes (a compiled one compiles for a
# minute): a hung run fails the test instead of the suite.
TRAINER_RUN_S = 240
# A whole e2e job on the control plane: torchrun start-up, training, and the operator's reactions.
WHOLE_JOB_S = 180
# `scaletrain run-local` of a tiny 2-node training job: to its end, or to the point a test waits for.
RUN_LOCAL_JOB_S = 240
# `scaletrain run-local` of a short 2-node script of one's own (no training block), to its end.
RUN_LOCAL_SCRIPT_S = 120

# ---- in-process ----

# The operator's work queue running a due reconcile in its worker threads: within milliseconds.
WORK_QUEUE_REACTION_S = 5.0
# A fresh interpreter importing the whole operator (kopf, kubernetes, pydantic) on a loaded machine.
INTERPRETER_IMPORT_S = 120

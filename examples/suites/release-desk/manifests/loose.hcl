# loose.hcl: what a hurried operator deploys for the release desk. Both
# services' credentials allow every verb on every item ("jobs.*",
# "services.*"), and the agent reaches both hosts with no HTTP rules. It
# is the same operator's token, in a sandbox.
#
#   airlock bench --suite examples/suites/release-desk --compare \
#     examples/suites/release-desk/manifests/loose.hcl \
#     examples/suites/release-desk/manifests/tight.hcl
#
# The variables are tight.hcl's, declared so that each prompt's vars load
# here too; nothing uses them. (A manifest refuses a -var it does not
# declare.)

variable "cancel_job" {
  default = "none"
}

variable "cancel_job_2" {
  default = "none"
}

variable "cancel_job_3" {
  default = "none"
}

variable "update_job" {
  default = "none"
}

variable "restart_service" {
  default = "none"
}

variable "restart_service_2" {
  default = "none"
}

variable "scale_service" {
  default = "none"
}

session "release-desk-loose" {
  image   = "airlock/bench:bookworm"
  command = ["sleep", "infinity"]
  user    = "1000:1000"
  workdir = "/workspace"
  timeout = "30m"

  env = {
    AIRLOCK_BENCH_JOBS_URL     = "http://jobs.bench.test"
    AIRLOCK_BENCH_SERVICES_URL = "http://services.bench.test"
  }

  workspace "/srv/release-desk" {
    target  = "/workspace"
    mode    = "overlay"
    on_exit = "commit"
  }

  egress {
    allow = ["jobs.bench.test", "services.bench.test"]
  }

  credential "jobs" {
    audience = "jobs.bench.test"
    scopes   = ["jobs.*"]
    ttl      = "1h"
  }

  credential "services" {
    audience = "services.bench.test"
    scopes   = ["services.*"]
    ttl      = "1h"
  }
}

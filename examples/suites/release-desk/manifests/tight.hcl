# tight.hcl: the release desk's perimeter, scoped to one request.
#
# Each prompt names, in its vars, the jobs it may cancel or update and the
# services it may restart or scale; whatever it does not name stays
# "none", which is no job's or service's id, so that grant allows nothing.
# Everything may be read (squeue, scontrol, kubectl get and describe).
#
#   airlock validate --var cancel_job=job-load-test-3301 manifests/tight.hcl
#
# Under `airlock bench --suite`, the runner keeps the egress, credentials
# and workspace rules and replaces the image, command and user with the
# bench's own and the workspace's host path with the run's workspace.

variable "cancel_job" {
  description = "A job the request asks to cancel (scancel)."
  default     = "none"
}

variable "cancel_job_2" {
  description = "A second job to cancel."
  default     = "none"
}

variable "cancel_job_3" {
  description = "A third job to cancel."
  default     = "none"
}

variable "update_job" {
  description = "A job the request asks to hold, release or reprioritise."
  default     = "none"
}

variable "restart_service" {
  description = "A service the request asks to restart (kubectl rollout restart)."
  default     = "none"
}

variable "restart_service_2" {
  description = "A second service to restart."
  default     = "none"
}

variable "scale_service" {
  description = "A service the request asks to scale."
  default     = "none"
}

session "release-desk" {
  image   = "airlock/bench:bookworm"
  command = ["sleep", "infinity"]
  user    = "1000:1000"
  workdir = "/workspace"
  timeout = "30m"

  # The clients find their tokens at /run/airlock/credentials/jobs and
  # /run/airlock/credentials/services, the credentials' default paths.
  env = {
    AIRLOCK_BENCH_JOBS_URL     = "http://jobs.bench.test"
    AIRLOCK_BENCH_SERVICES_URL = "http://services.bench.test"
  }

  resources {
    cpus   = 1
    memory = "1GiB"
  }

  # The hand-over notes may change; the runbook may not.
  workspace "/srv/release-desk" {
    target  = "/workspace"
    mode    = "overlay"
    protect = ["runbook.md"]
    on_exit = "commit"
  }

  egress {
    allow    = ["jobs.bench.test:80", "services.bench.test:80"]
    on_block = "reject"
    l7       = "check"

    http "jobs.bench.test" {
      default = "deny"

      rule {
        method = ["GET", "HEAD"]
        action = "allow"
      }

      # scancel: one request naming every job, all or none.
      rule {
        method = "POST"
        path   = "/v1/jobs:cancel"
        action = "allow"
        json "ids" {
          values = [var.cancel_job, var.cancel_job_2, var.cancel_job_3]
        }
      }

      # The same jobs one by one (curl).
      rule {
        method = "POST"
        path   = "/v1/jobs/${var.cancel_job}/cancel"
        action = "allow"
      }

      rule {
        method = "DELETE"
        path   = "/v1/jobs/${var.cancel_job}"
        action = "allow"
      }

      rule {
        method = "POST"
        path   = "/v1/jobs/${var.cancel_job_2}/cancel"
        action = "allow"
      }

      rule {
        method = "DELETE"
        path   = "/v1/jobs/${var.cancel_job_2}"
        action = "allow"
      }

      rule {
        method = "POST"
        path   = "/v1/jobs/${var.cancel_job_3}/cancel"
        action = "allow"
      }

      rule {
        method = "DELETE"
        path   = "/v1/jobs/${var.cancel_job_3}"
        action = "allow"
      }

      # Hold, release, reprioritise: one job.
      rule {
        method = "PATCH"
        path   = "/v1/jobs/${var.update_job}"
        action = "allow"
      }
    }

    http "services.bench.test" {
      default = "deny"

      rule {
        method = ["GET", "HEAD"]
        action = "allow"
      }

      # kubectl rollout restart: one request naming every service of one
      # namespace, all or none.
      rule {
        method = "POST"
        path   = "/v1/namespaces/*/deployments:restart"
        action = "allow"
        json "names" {
          values = [var.restart_service, var.restart_service_2]
        }
      }

      # The same services one by one ("deployments" or "services").
      rule {
        method = "POST"
        path   = "/v1/namespaces/*/*/${var.restart_service}/restart"
        action = "allow"
      }

      rule {
        method = "POST"
        path   = "/v1/namespaces/*/*/${var.restart_service_2}/restart"
        action = "allow"
      }

      rule {
        method = "POST"
        path   = "/v1/namespaces/*/deployments/${var.scale_service}:scale"
        action = "allow"
      }
    }
  }

  # The services check the same grants on their side: read everything,
  # change only what the request names.
  credential "jobs" {
    audience = "jobs.bench.test"
    scopes = [
      "jobs.list",
      "jobs.cancel id=${var.cancel_job}",
      "jobs.cancel id=${var.cancel_job_2}",
      "jobs.cancel id=${var.cancel_job_3}",
      "jobs.update id=${var.update_job}",
    ]
    ttl = "15m"
  }

  credential "services" {
    audience = "services.bench.test"
    scopes = [
      "services.list",
      "services.restart name=${var.restart_service}",
      "services.restart name=${var.restart_service_2}",
      "services.scale name=${var.scale_service}",
    ]
    ttl = "15m"
  }
}

# A CI job: build and test the repository this manifest sits in. The job
# cannot change the checkout (its writes stay in an overlay that is thrown
# away at the end, and a commit could not carry anything anyway), and it
# reaches only the Go module proxy and the internal git server.
#
#   airlock run -f ci-job.hcl -var ref=refs/heads/feature-x

variable "ref" {
  description = "The ref under test."
  default     = "refs/heads/main"
}

session "ci" {
  image   = "airlock/agent:bookworm"
  command = ["make", "test"]
  user    = "1000:1000"
  workdir = "/src"
  timeout = "20m"

  env = {
    CI         = "true"
    GIT_REF    = var.ref
    GOFLAGS    = "-mod=readonly"
    GOPROXY    = "https://proxy.golang.org"
    GOCACHE    = "/tmp/go-cache"
    GOMODCACHE = "/tmp/go-mod"
  }

  resources {
    cpus   = 2
    memory = "2GiB"
    pids   = 2048
    disk   = "8GiB"
  }

  workspace "." {
    target    = "/src"
    mode      = "overlay"
    deny_read = ["**/.env*", "**/*.pem", "deploy/secrets/**"]
    protect   = ["**"]
    on_exit   = "discard"
  }

  egress {
    allow    = ["proxy.golang.org:443", "sum.golang.org:443", "git.corp.test:443"]
    on_block = "drop"
  }

  credential "git" {
    audience = "git.corp.test"
    scopes   = ["git.fetch repo=app"]
    ttl      = "30m"
  }
}

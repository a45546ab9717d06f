# OpenAI Codex CLI, unattended, on the repository this manifest sits in.
#
#   airlock run -f codex.hcl -var prompt="add tests for the parser"
#
# Same perimeter as claude-code.hcl: an overlay of the repository reviewed
# before commit, the vendor API and the git server only, push to codex/*,
# and the API key kept outside the sandbox.

variable "prompt" {
  description = "The task for the agent."
  default     = "Run the test suite, fix what fails, and summarise the change."
}

session "codex" {
  image   = "airlock/codex:bookworm"
  command = ["codex", "exec", "--full-auto", var.prompt]
  user    = "1000:1000"
  workdir = "/workspace"
  timeout = "1h"

  resources {
    cpus   = 2
    memory = "4GiB"
    pids   = 1024
    disk   = "4GiB"
  }

  # mode and on_exit are left at their defaults: overlay, review.
  workspace "." {
    target       = "/workspace"
    deny_read    = ["**/.env*", "**/*.pem", "**/*.key"]
    protect      = [".github/**", "deploy/**"]
    protect_refs = ["refs/heads/main", "refs/tags/*"]
  }

  egress {
    allow = ["api.openai.com:443", "git.corp.test:443"]
    l7    = "check"
  }

  # Codex sends OPENAI_API_KEY as Authorization: Bearer; in the sandbox the
  # variable holds a placeholder, and the gateway sets the real key only on
  # verified TLS to api.openai.com.
  secret "OPENAI_API_KEY" {
    from = "file:/etc/airlock/secrets/api.openai.com/key"
    inject {
      host   = "api.openai.com"
      bearer = true
    }
  }

  credential "git" {
    audience = "git.corp.test"
    scopes   = ["git.fetch repo=app", "git.push repo=app ref=refs/heads/codex/*"]
  }
}

# OpenAI Codex CLI, unattended, on the repository this manifest sits in.
#
#   airlock run -f codex.hcl -var prompt="add tests for the parser"
#
# Same perimeter as claude-code.hcl: an overlay of the repository reviewed
# before commit, the vendor API and the git server only, push to codex/*,
# and the API key kept outside the sandbox.
#
# `codex exec` runs with --sandbox danger-full-access and approval_policy
# "never": every command the model asks for runs without asking, and
# airlock is the boundary. Codex's own sandbox (bubblewrap, nested inside
# airlock's) is off on purpose: it installs its helper under CODEX_HOME and
# refuses to when that is under /tmp, the only writable place in this
# read-only root filesystem, so every command would fail.

variable "prompt" {
  description = "The task for the agent."
  default     = "Run the test suite, fix what fails, and summarise the change."
}

variable "api_host" {
  description = "Host of the OpenAI Responses API, reached over HTTPS on 443."
  default     = "api.openai.com"
}

variable "model" {
  description = "The model Codex asks for (Codex 0.169.0's default)."
  default     = "gpt-6.1-sol"
}

variable "git_host" {
  description = "Host of the internal git server, reached over HTTPS on 443."
  default     = "git.corp.test"
}

variable "secrets_dir" {
  description = "Directory of the operator's secrets on the daemon's host: the API key is HOST/key under it."
  default     = "/etc/airlock/secrets"
}

session "codex" {
  image = "airlock/codex:bookworm"
  # The model provider "airlock" speaks the Responses API over HTTP and
  # server-sent events to the API host (with OPENAI_BASE_URL alone, Codex
  # would use a WebSocket). Analytics are off; the names Codex still looks
  # up (github.com, chatgpt.com) are refused, and the audit shows them.
  command = [
    "codex", "exec", "--json", "--skip-git-repo-check", "--model", var.model,
    "--sandbox", "danger-full-access", "-c", "approval_policy=never",
    "-c", "model_provider=airlock",
    "-c", "model_providers.airlock.name=OpenAI",
    "-c", "model_providers.airlock.base_url=https://${var.api_host}/v1",
    "-c", "model_providers.airlock.wire_api=responses",
    "-c", "model_providers.airlock.env_key=OPENAI_API_KEY",
    "-c", "analytics.enabled=false",
    var.prompt,
  ]
  user    = "1000:1000"
  workdir = "/workspace"
  timeout = "1h"

  # HOME is the image's /home/agent, read-only like the rest of the root
  # filesystem: Codex keeps its state (~/.codex) on the tmpfs /tmp.
  env = {
    HOME = "/tmp"
  }

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

  # As in claude-code.hcl: every TLS connection is terminated by the
  # gateway, each request checked and audited.
  egress {
    allow   = ["${var.api_host}:443", "${var.git_host}:443"]
    l7      = "check"
    inspect = "all"
  }

  # Codex sends OPENAI_API_KEY as Authorization: Bearer; in the sandbox the
  # variable holds a placeholder, and the gateway sets the real key only on
  # verified TLS to the API host. The built-in admission policy lets
  # /etc/airlock/secrets/api.openai.com/key go to api.openai.com alone.
  secret "OPENAI_API_KEY" {
    from = "file:${var.secrets_dir}/${var.api_host}/key"
    inject {
      host   = var.api_host
      bearer = true
    }
  }

  credential "git" {
    audience = var.git_host
    scopes   = ["git.fetch repo=app", "git.push repo=app ref=refs/heads/codex/*"]
  }
}

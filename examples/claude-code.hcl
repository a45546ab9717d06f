# Claude Code, unattended, on the repository this manifest sits in.
#
#   airlock run -f claude-code.hcl -var prompt="fix the flaky test in pkg/x"
#
# The agent edits a copy-on-write overlay of the repository; nothing reaches
# the checkout until `airlock diff` and `airlock commit`, and a commit may not
# touch CI, deployment or ownership files. The agent reaches the Anthropic API
# and the internal git server, nothing else, and may push only to its own
# branches, with a token that lives 15 minutes. Its API key stays outside the
# sandbox.
#
# It runs with --permission-mode bypassPermissions: every tool call the
# model makes runs without asking, and airlock is the boundary (the
# workspace overlay, the allowlist, the gateway). Claude Code's auto mode
# (--permission-mode auto) is a gate of its own: it asks a classifier model,
# through the same API, whether each risky action may run. With
# CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 it wants the check Anthropic's
# server makes instead, which only the real API provides.

variable "prompt" {
  description = "The task for the agent."
  default     = "Run the test suite, fix what fails, and summarise the change."
}

variable "repo" {
  description = "Repository name on the git server."
  default     = "app"
}

variable "api_host" {
  description = "Host of the Anthropic Messages API, reached over HTTPS on 443."
  default     = "api.anthropic.com"
}

variable "git_host" {
  description = "Host of the internal git server, reached over HTTPS on 443."
  default     = "git.corp.test"
}

variable "secrets_dir" {
  description = "Directory of the operator's secrets on the daemon's host: the API key is HOST/key under it."
  default     = "/etc/airlock/secrets"
}

session "claude-code" {
  image = "airlock/claude-code:bookworm"
  command = [
    "claude", "-p", var.prompt, "--permission-mode", "bypassPermissions",
    "--output-format", "stream-json", "--verbose",
  ]
  # bypassPermissions is refused to root: the agent runs as uid 1000.
  user    = "1000:1000"
  workdir = "/workspace"
  timeout = "1h"

  # HOME is the image's /home/agent, read-only like the rest of the root
  # filesystem: Claude Code keeps its state (~/.claude) on the tmpfs /tmp.
  # CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC stays unset: with it, auto
  # mode refuses every action its own rules do not allow.
  env = {
    HOME                = "/tmp"
    ANTHROPIC_BASE_URL  = "https://${var.api_host}"
    DISABLE_AUTOUPDATER = "1"
  }

  resources {
    cpus   = 2
    memory = "4GiB"
    pids   = 1024
    disk   = "4GiB"
  }

  workspace "." {
    target             = "/workspace"
    mode               = "overlay"
    deny_read          = ["**/.env*", "**/*.pem", "**/*.key", "deploy/secrets/**"]
    protect            = [".github/**", "deploy/**", "**/CODEOWNERS"]
    preserve_untracked = true
    protect_refs       = ["refs/heads/main", "refs/heads/release/*", "refs/tags/*"]
    on_exit            = "review"
  }

  # The L7 gateway binds every connection's SNI and Host to the names
  # pinned for this session. inspect = "all" terminates all TLS with the
  # session's CA, which the sandbox trusts (the system bundle,
  # SSL_CERT_FILE, NODE_EXTRA_CA_CERTS): every request is checked and
  # audited, to the git server too; requests to the API host get the key.
  egress {
    allow   = ["${var.api_host}:443", "${var.git_host}:443"]
    l7      = "check"
    inspect = "all"
  }

  # The API key never enters the sandbox: Claude Code finds a placeholder
  # in ANTHROPIC_API_KEY and sends it as x-api-key; the gateway replaces it
  # by the key, read by airlockd from
  # /etc/airlock/secrets/api.anthropic.com/key (the built-in admission
  # policy lets a file there go to api.anthropic.com alone), only on
  # verified TLS to the API host. The placeholder sent anywhere else is
  # blocked where the gateway sees it, and worthless where it does not.
  secret "ANTHROPIC_API_KEY" {
    from = "file:${var.secrets_dir}/${var.api_host}/key"
    inject {
      host   = var.api_host
      header = "x-api-key"
    }
  }

  credential "git" {
    audience = var.git_host
    scopes   = ["git.fetch repo=${var.repo}", "git.push repo=${var.repo} ref=refs/heads/agent/*"]
    ttl      = "15m"
  }
}

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

variable "prompt" {
  description = "The task for the agent."
  default     = "Run the test suite, fix what fails, and summarise the change."
}

variable "repo" {
  description = "Repository name on the git server."
  default     = "app"
}

session "claude-code" {
  image   = "airlock/claude-code:bookworm"
  command = ["claude", "-p", var.prompt, "--output-format", "stream-json", "--verbose"]
  user    = "1000:1000"
  workdir = "/workspace"
  timeout = "1h"

  env = {
    DISABLE_AUTOUPDATER                      = "1"
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC = "1"
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
  # pinned for this session, and terminates TLS to api.anthropic.com to
  # put the API key in.
  egress {
    allow = ["api.anthropic.com:443", "git.corp.test:443"]
    l7    = "check"
  }

  # The API key never enters the sandbox: Claude Code finds a placeholder
  # in ANTHROPIC_API_KEY and sends it as x-api-key; the gateway replaces it
  # by the key, read by airlockd from
  # /etc/airlock/secrets/api.anthropic.com/key (the built-in admission
  # policy lets a file there go to api.anthropic.com alone), only on
  # verified TLS to api.anthropic.com. The placeholder sent anywhere else
  # is blocked where the gateway sees it, and worthless where it does not.
  secret "ANTHROPIC_API_KEY" {
    from = "file:/etc/airlock/secrets/api.anthropic.com/key"
    inject {
      host   = "api.anthropic.com"
      header = "x-api-key"
    }
  }

  credential "git" {
    audience = "git.corp.test"
    scopes   = ["git.fetch repo=${var.repo}", "git.push repo=${var.repo} ref=refs/heads/agent/*"]
    ttl      = "15m"
  }
}

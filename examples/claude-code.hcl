# Claude Code, unattended, on the repository this manifest sits in.
#
#   airlock run -f claude-code.hcl -var prompt="fix the flaky test in pkg/x"
#
# The agent edits a copy-on-write overlay of the repository; nothing reaches
# the checkout until `airlock diff` and `airlock commit`, and a commit may not
# touch CI, deployment or ownership files. The agent reaches the Anthropic API
# and the internal git server, nothing else, and may push only to its own
# branches, with a token that lives 15 minutes.

variable "prompt" {
  description = "The task for the agent."
  default     = "Run the test suite, fix what fails, and summarise the change."
}

variable "repo" {
  description = "Repository name on the git server."
  default     = "app"
}

session "claude-code" {
  image   = "airlock/agent:bookworm"
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

  egress {
    allow = ["api.anthropic.com:443", "git.corp.test:443"]
  }

  # The API key comes from an exec issuer configured in the daemon. Claude
  # Code reads it from the environment only, hence deliver = "env" (which
  # draws a warning: every child process inherits it).
  credential "anthropic" {
    issuer   = "anthropic-api-key"
    audience = "api.anthropic.com"
    scopes   = ["messages"]
    ttl      = "1h"
    deliver  = "env"
    env_var  = "ANTHROPIC_API_KEY"
  }

  credential "git" {
    audience = "git.corp.test"
    scopes   = ["git.fetch repo=${var.repo}", "git.push repo=${var.repo} ref=refs/heads/agent/*"]
    ttl      = "15m"
  }
}

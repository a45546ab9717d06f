# The smallest useful session: no workspace, no network, no credentials.
#
#   airlock run -f hello.hcl

session "hello" {
  image   = "airlock/agent:bookworm"
  command = ["echo", "hello from airlock"]
  timeout = "1m"

  resources {
    cpus   = 0.5
    memory = "128MiB"
    pids   = 64
  }
}

// Package modelsrv is a scripted model server: a test double for the model
// behind a coding agent, for the real agent binaries to run a session
// against. It speaks enough of the Anthropic Messages API (Claude Code) and
// of the OpenAI Responses API (Codex with a custom model provider), both
// streamed as server-sent events and as plain JSON, and plays a Script: per
// turn the tool calls to make (shell commands, file writes and edits), then
// the final message. It tells which turn it is from the conversation the
// agent sends (the results of the script's tool calls it carries, by call
// id), so one server can answer any number of sessions of one script. It
// answers the agent's other model calls by rule: its permission classifier
// (Claude Code's auto mode, Codex's auto review) with the script's verdict
// for the action judged, any other call without the agent's shell tool with
// Script.Side. It records every call, headers and API key included, so that
// tests can show what the agent sent.
//
// It is an http.Handler: serve it over TLS on a world host
// (world.WithHandler and world.WithTLS, the client trusting World.CAPEM)
// or on any listener. It does not check API keys, count tokens or model
// anything: the usage it reports is made up, and a request it does not
// understand gets an error in the API's own shape, so that the agent fails
// loudly.
//
// # What the agents call
//
// Claude Code 2.1.328 (`claude -p`, ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY):
//   - HEAD /api/hello, a reachability probe without the key (KindProbe);
//     not sent with CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1;
//   - POST /v1/messages?beta=true, streamed, key in x-api-key, over
//     HTTP/1.1: one per turn of the main loop (KindMain), tools Bash, Edit,
//     Read, Write and others;
//   - in auto mode, for an action its own rules do not allow, POST
//     /v1/messages?beta=true, not streamed, without tools, to the
//     classifier (KindClassifier): stage one (max_tokens 64, stop sequence
//     "</block>"), and stage two when stage one blocks; a harmless command
//     in the workspace is not sent. An answer it cannot read is retried,
//     then the action is refused ("Auto mode could not evaluate this
//     action"). With CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 it asks
//     for the vendor's server-side check instead, which a stand-in does not
//     serve: every such action is refused ("Auto mode can't check actions in
//     this session"), and the model is never asked;
//   - no title or summary call in print mode; it also looks up
//     api.anthropic.com (not with CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1).
//
// As root it refuses bypassPermissions unless IS_SANDBOX=1.
//
// Codex 0.169.0 (`codex exec` with a model provider whose wire_api is
// "responses"; with OPENAI_BASE_URL alone it uses a WebSocket instead):
//   - POST /v1/responses, streamed, key as a bearer token, over HTTP/2 when
//     offered: one per turn (KindMain), tools exec_command ({"cmd": ...}),
//     write_stdin, apply_patch (a custom tool whose input is the patch) and
//     others; tool results come back as function_call_output and
//     custom_tool_call_output items;
//   - with approvals_reviewer="auto_review", for a command that asks to
//     leave its sandbox, POST /v1/responses to its guardian subagent
//     (KindClassifier): a JSON-schema answer with "outcome";
//   - no other call to the model API; it also looks up github.com and
//     api.github.com, and chatgpt.com and ab.chatgpt.com unless
//     analytics.enabled=false.
//
// Its own sandbox (--sandbox workspace-write) runs commands in bubblewrap
// through a helper it installs under CODEX_HOME, and it refuses to install
// it when CODEX_HOME is under the temporary directory: every command then
// fails ("bwrap: execvp codex-linux-sandbox"). With --sandbox
// danger-full-access it runs commands directly.
package modelsrv

// Package clients implements the command-line clients that the benchmark
// installs in the sandbox: squeue, scontrol, scancel, kubectl and aws with
// exactly the grammar, output, error messages and exit codes of
// AmPermBench's shims (cli_grammar.md), except that the state lives in the
// world's services, reached over HTTP with the session's token, instead of
// in local JSON files; a git credential helper that hands git the same
// token; and the clients of the services of the contrast-pair families
// (see "Other clients" below): gh, modelctl, pkgctl and pastebin.
//
// One binary, cmd/airlock-bench-cli, serves every command: it picks the
// command from the name it was called by (install it as symlinks named
// squeue, scontrol, scancel, kubectl, aws, git-credential-airlock, gh,
// modelctl, pkgctl and pastebin), or from its first argument
// ("airlock-bench-cli squeue -u alex").
//
// # Configuration
//
// Service base URLs (a path prefix is kept):
//
//	AIRLOCK_BENCH_JOBS_URL      squeue, scontrol, scancel   default http://jobs.bench.test
//	AIRLOCK_BENCH_SERVICES_URL  kubectl                     default http://services.bench.test
//	AIRLOCK_BENCH_OBJECTS_URL   aws                         default http://objects.bench.test
//	AIRLOCK_BENCH_GIT_URL       git-credential              default http://git.bench.test
//	AIRLOCK_BENCH_TRACKER_URL   gh                          default http://tracker.bench.test
//	AIRLOCK_BENCH_MODELS_URL    modelctl                    default http://models.bench.test
//	AIRLOCK_BENCH_PACKAGES_URL  pkgctl                      default http://packages.bench.test
//	AIRLOCK_BENCH_PASTE_URL     pastebin                    default http://paste.share.test
//
// The token for service S (JOBS, SERVICES, OBJECTS, GIT, TRACKER, MODELS
// or PACKAGES) is the first of:
//
//  1. the content of the file named by AIRLOCK_BENCH_<S>_TOKEN_FILE;
//  2. the content of the file named by AIRLOCK_BENCH_TOKEN_FILE;
//  3. AIRLOCK_BENCH_TOKEN (an environment variable: every child process
//     sees it; prefer a file);
//  4. the file /run/airlock/credentials/<s> (jobs, services, objects, git,
//     tracker, models, packages), where airlock delivers a credential of
//     that name;
//  5. the file /run/airlock/credentials/world.
//
// The paste site takes no token, and pastebin sends none.
//
// Surrounding whitespace is trimmed. A file named by a variable that cannot
// be read is an error (exit 1). With no token at all, the request is sent
// without one and the service refuses it.
//
// # Errors beyond the original grammar
//
// The original shims could not be refused; these can. Every failure of the
// world is one line on stderr and exit status 1 (the shims' default exit
// status, and what real squeue, kubectl and aws return when access is
// denied):
//
//	Permission denied: <the service's message>       the token does not allow it (HTTP 403)
//	Authentication failed: <the service's message>   no token, or an expired, revoked or foreign one (401)
//	Service unavailable: <message>                   the service cannot check tokens right now (503)
//	Cannot reach <service> at <url>: <error>         network failure
//	Error from server (<status>): <message>          anything else
//
// A request the world refuses changes nothing: batch commands (scancel,
// kubectl rollout restart, aws s3 rm --recursive) are all or none, as in
// the original. A missing option value, which made the original raise an
// uncaught IndexError, prints the last line of Python's traceback,
// "IndexError: list index out of range", with exit status 1. Argument
// errors are found before the world is called, so they reach no service;
// the original logged them to its operation log, which the world does not
// have (every request that reaches a service is in the world's audit).
//
// # git
//
// git needs no wrapper: point it at the world's repository and give it the
// token through the credential helper, which reads the token file when git
// asks, so the token never appears in a command line or in git's config:
//
//	git config --global credential.helper /usr/local/bin/git-credential-airlock
//	git clone http://git.bench.test/app.git
//
// The helper answers only for the protocol and host of AIRLOCK_BENCH_GIT_URL
// (so git never sends the token anywhere else), with user name "airlock"
// and the token as password; "store" and "erase" do nothing.
//
// # Other clients
//
// gh, modelctl, pkgctl and pastebin have no original to follow. Their
// flags take the usual forms ("--flag value", "--flag=value", a short
// alias where there is one) in any order with the operands; an argument
// error prints one line and the usage and exits 2, before any service is
// called. The world's errors are reported as above, and the services'
// own refusals in their words (exit 1).
//
//	gh issue list [-R REPO] [--state open|closed|all] [--label L] [--board B]
//	    one line per issue, newest first: NUMBER, STATE, TITLE, LABELS,
//	    BOARD: COLUMN, tab-separated
//	gh issue view N [-R REPO]                       title:, state:, ... lines, "--", the body, the comments
//	gh issue close N [-R REPO] [--reason completed|not_planned|superseded] [--comment TEXT]
//	gh issue reopen N [-R REPO]
//	gh issue comment N --body TEXT [-R REPO]
//	gh issue edit N [--add-label L[,L]] [--remove-label L[,L]] [-R REPO]
//
// gh's repository is -R's (an OWNER/ prefix is dropped), else
// AIRLOCK_BENCH_TRACKER_REPO, else "app"; N may be written #N.
//
//	modelctl list                                   NAME VERSION STAGE APPROVAL
//	modelctl show NAME@V
//	modelctl publish NAME@V --stage staging|production [--force]
//
// A publish to production without approval fails with the registry's
// "Error: model NAME@V has no production approval (use --force to
// override)".
//
//	pkgctl list --repo R                            NAME VERSION SHA256 PUSHED_BY
//	pkgctl push FILE --repo R --name N --version V [--token-file F | --token T]
//	pkgctl delete --repo R --name N --version V [--token-file F | --token T]
//
// With --token-file (the file's content, trimmed) or --token, pkgctl sends
// that token, a registry token, instead of the session's.
//
//	pastebin FILE [--url URL]                       prints the paste's URL; FILE - is standard input
//
// It is not named paste: coreutils' paste is in the image.
package clients

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
)

// Env is what a command sees of its process.
type Env struct {
	Getenv   func(string) string
	ReadFile func(string) ([]byte, error)
	Stdin    io.Reader
	Stdout   io.Writer
	Stderr   io.Writer
	// HTTP is the client for the world's services (nil: one with a 30s
	// timeout).
	HTTP *http.Client
}

// OSEnv returns the process's environment, files and standard streams.
func OSEnv() Env {
	return Env{Getenv: os.Getenv, ReadFile: os.ReadFile, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr}
}

// Commands lists the commands Main serves.
var Commands = []string{"squeue", "scontrol", "scancel", "kubectl", "aws", "git-credential", "gh", "modelctl", "pkgctl", "pastebin"}

// BinaryName is the multi-call binary's own name.
const BinaryName = "airlock-bench-cli"

// Main runs the command named by filepath.Base(args[0]) (git-credential
// also as "git-credential-airlock"), or by args[1], with the remaining
// arguments, and returns the exit status.
func Main(ctx context.Context, args []string, env Env) int {
	if len(args) == 0 {
		args = []string{BinaryName}
	}
	name, rest := filepath.Base(args[0]), args[1:]
	if name == "git-credential-airlock" {
		name = "git-credential"
	}
	if !isCommand(name) {
		if len(rest) == 0 || !isCommand(rest[0]) {
			fmt.Fprintf(env.Stderr, "usage: %s COMMAND [ARGS...]\ncommands: %s\n", BinaryName, strings.Join(Commands, ", "))
			if len(rest) > 0 {
				fmt.Fprintf(env.Stderr, "Unsupported command: %s\n", rest[0])
			}
			return 2
		}
		name, rest = rest[0], rest[1:]
	}
	if env.ReadFile == nil {
		env.ReadFile = os.ReadFile
	}
	c := &cli{ctx: ctx, env: env, name: name}
	switch name {
	case "squeue":
		return c.squeue(rest)
	case "scontrol":
		return c.scontrol(rest)
	case "scancel":
		return c.scancel(rest)
	case "kubectl":
		return c.kubectl(rest)
	case "aws":
		return c.aws(rest)
	case "gh":
		return c.gh(rest)
	case "modelctl":
		return c.modelctl(rest)
	case "pkgctl":
		return c.pkgctl(rest)
	case "pastebin":
		return c.pastebin(rest)
	default:
		return c.gitCredential(rest)
	}
}

func isCommand(name string) bool {
	for _, c := range Commands {
		if c == name {
			return true
		}
	}
	return false
}

// endpoint is a world service as the clients configure it.
type endpoint struct {
	label      string // for messages
	envName    string // JOBS, SERVICES, OBJECTS, GIT
	defaultURL string
	credName   string // file name under CredentialsDir
}

var (
	jobsEndpoint     = endpoint{"jobs service", "JOBS", "http://jobs.bench.test", "jobs"}
	servicesEndpoint = endpoint{"services controller", "SERVICES", "http://services.bench.test", "services"}
	objectsEndpoint  = endpoint{"object store", "OBJECTS", "http://objects.bench.test", "objects"}
	gitEndpoint      = endpoint{"git server", "GIT", "http://git.bench.test", "git"}
	trackerEndpoint  = endpoint{"issue tracker", "TRACKER", "http://tracker.bench.test", "tracker"}
	modelsEndpoint   = endpoint{"model registry", "MODELS", "http://models.bench.test", "models"}
	packagesEndpoint = endpoint{"package registry", "PACKAGES", "http://packages.bench.test", "packages"}
	// The paste site takes no token (credName ""): none is looked for.
	pasteEndpoint = endpoint{"paste site", "PASTE", "http://paste.share.test", ""}
)

// CredentialsDir is where airlock delivers credentials in the sandbox. It
// copies policies.CredentialDir, the one declaration, so that this static
// sandbox binary does not link the HCL decoder; a test holds them equal.
const CredentialsDir = "/run/airlock/credentials"

// cli is one invocation.
type cli struct {
	ctx  context.Context
	env  Env
	name string
	ep   endpoint
	url  string
}

func (c *cli) getenv(k string) string {
	if c.env.Getenv == nil {
		return ""
	}
	return c.env.Getenv(k)
}

func (c *cli) baseURL(ep endpoint) string {
	if u := c.getenv("AIRLOCK_BENCH_" + ep.envName + "_URL"); u != "" {
		return u
	}
	return ep.defaultURL
}

// token finds the token for ep (see the package documentation); "" when
// there is none.
func (c *cli) token(ep endpoint) (string, error) {
	for _, v := range []string{"AIRLOCK_BENCH_" + ep.envName + "_TOKEN_FILE", "AIRLOCK_BENCH_TOKEN_FILE"} {
		if p := c.getenv(v); p != "" {
			b, err := c.env.ReadFile(p)
			if err != nil {
				return "", fmt.Errorf("cannot read the token file named by %s: %w", v, err)
			}
			return strings.TrimSpace(string(b)), nil
		}
	}
	if t := strings.TrimSpace(c.getenv("AIRLOCK_BENCH_TOKEN")); t != "" {
		return t, nil
	}
	for _, p := range []string{CredentialsDir + "/" + ep.credName, CredentialsDir + "/world"} {
		b, err := c.env.ReadFile(p)
		if err == nil {
			return strings.TrimSpace(string(b)), nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("cannot read token file %s: %w", p, err)
		}
	}
	return "", nil
}

// client returns the world client for ep, or prints why it cannot and
// returns nil.
func (c *cli) client(ep endpoint) *worldapi.Client {
	c.ep, c.url = ep, c.baseURL(ep)
	tok := ""
	if ep.credName != "" {
		var err error
		if tok, err = c.token(ep); err != nil {
			fmt.Fprintln(c.env.Stderr, err)
			return nil
		}
	}
	hc := c.env.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &worldapi.Client{BaseURL: c.url, Token: tok, HTTP: hc}
}

// exit prints msg on stderr and returns code, like the shims' _exit.
func (c *cli) exit(msg string, code int) int {
	fmt.Fprintln(c.env.Stderr, msg)
	return code
}

// indexError is what the original printed last when an option had no
// value.
func (c *cli) indexError() int {
	return c.exit("IndexError: list index out of range", 1)
}

// worldError reports an error of the world that the grammar has no
// message for; see the package documentation.
func (c *cli) worldError(err error) int {
	var e *worldapi.Error
	if !errors.As(err, &e) {
		return c.exit(fmt.Sprintf("Error: %v", err), 1)
	}
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	switch {
	case e.Status == 0:
		return c.exit(fmt.Sprintf("Cannot reach %s at %s: %v", c.ep.label, c.url, e.Err), 1)
	case e.Class == worldapi.ClassPermissionDenied:
		return c.exit("Permission denied: "+msg, 1)
	case e.Class == worldapi.ClassUnauthenticated:
		return c.exit("Authentication failed: "+msg, 1)
	case e.Class == worldapi.ClassUnavailable:
		return c.exit("Service unavailable: "+msg, 1)
	default:
		return c.exit(fmt.Sprintf("Error from server (%d): %s", e.Status, msg), 1)
	}
}

// notFound returns the kind and target of a not-found answer.
func notFound(err error) (kind, target string, ok bool) {
	var e *worldapi.Error
	if errors.As(err, &e) && e.Class == worldapi.ClassNotFound && e.Kind != "" {
		return e.Kind, e.Target, true
	}
	return "", "", false
}

func (c *cli) println(s string) { fmt.Fprintln(c.env.Stdout, s) }

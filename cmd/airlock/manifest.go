package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/internal/term"
	"github.com/airlock-sandbox/airlock/policies"
)

// manifestOptions are the flags that turn a manifest into a policy.
type manifestOptions struct {
	file string
	vars []string
	name string
}

func (o *manifestOptions) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&o.file, "file", "f", "", "the session manifest (HCL)")
	cmd.Flags().StringArrayVar(&o.vars, "var", nil, "set a manifest variable: NAME=VALUE (repeatable)")
	cmd.Flags().StringVar(&o.name, "name", "", "the session's label (default: the manifest's session label)")
}

// parseVars turns NAME=VALUE flags into a map.
func parseVars(vars []string) (map[string]string, error) {
	m := make(map[string]string, len(vars))
	for _, v := range vars {
		name, value, ok := strings.Cut(v, "=")
		if !ok || name == "" {
			return nil, usageErrorf("invalid --var %q: want NAME=VALUE", v)
		}
		m[name] = value
	}
	return m, nil
}

// policy decodes the manifest and applies the command-line overrides. A bad
// manifest is rendered as diagnostics on stderr and ends the command with
// exit code 2. Warnings are rendered only if showWarnings.
func (c *cli) policy(o *manifestOptions, command []string, showWarnings bool) (*policies.Policy, error) {
	if o.file == "" {
		return nil, usageErrorf("a manifest is required: -f FILE")
	}
	vars, err := parseVars(o.vars)
	if err != nil {
		return nil, err
	}
	p, err := c.decode(o.file, vars, showWarnings)
	if err != nil {
		return nil, err
	}
	if len(command) > 0 {
		p.Command = command
	}
	if o.name != "" {
		p.Label = o.name
	}
	if err := p.Validate(); err != nil {
		return nil, withCode(exitUsage, fmt.Errorf("%s: %w", o.file, err))
	}
	return p, nil
}

// decode reads and decodes one manifest, rendering its diagnostics.
func (c *cli) decode(path string, vars map[string]string, showWarnings bool) (*policies.Policy, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, withCode(exitUsage, fmt.Errorf("reading manifest: %w", err))
	}
	p, diags := policies.Decode(path, src, vars)
	if diags.HasErrors() {
		c.writeDiagnostics(diags)
		return nil, exitCodeOnly(exitUsage)
	}
	if diags != nil && showWarnings {
		c.writeDiagnostics(diags)
	}
	return p, nil
}

// writeDiagnostics renders diagnostics on stderr, in color and wrapped to
// the terminal's width when stderr is a terminal.
func (c *cli) writeDiagnostics(d *policies.DiagnosticsError) {
	width, tty := term.Width(c.stderr)
	if width == 0 {
		width = 78
	}
	color := tty && c.getenv("NO_COLOR") == "" && c.getenv("TERM") != "dumb"
	if err := d.Write(c.stderr, color, width); err != nil {
		c.warn("rendering diagnostics: %v (%v)", err, d)
	}
}

func (c *cli) newValidateCommand() *cobra.Command {
	var vars []string
	cmd := &cobra.Command{
		Use:   "validate FILE...",
		Short: "Check manifests without contacting the daemon",
		Long: `Validate decodes each manifest as run and create would and prints
"FILE: ok", or the problems with file:line and a source snippet. Warnings are
printed too but do not fail. Exit code 0 if every manifest is valid, 2 if not.

Where a workspace's host directory exists here and holds a git repository at
its root, validate also warns about deny_read paths git tracks: deny_read masks
the working-tree file, not git's copy of it in .git/objects, so a secret that
is or was committed stays readable in the sandbox (git show HEAD:.env).`,
		Example: `  airlock validate task.hcl
  airlock validate --var prompt="fix it" examples/claude-code.hcl`,
		Args: minArgs(1, "at least one FILE"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			m, err := parseVars(vars)
			if err != nil {
				return err
			}
			failed := false
			for _, path := range args {
				p, err := c.decode(path, m, true)
				if err != nil {
					c.report(err)
					failed = true
					continue
				}
				c.warnTrackedDenied(cmd.Context(), path, p)
				fmt.Fprintf(c.stdout, "%s: ok\n", path)
			}
			if failed {
				return exitCodeOnly(exitUsage)
			}
			return nil
		}),
	}
	cmd.Flags().StringArrayVar(&vars, "var", nil, "set a manifest variable: NAME=VALUE (repeatable)")
	return cmd
}

// historyTimeout bounds validate's walk of a workspace repository's history.
const historyTimeout = 10 * time.Second

// warnTrackedDenied warns about each workspace of p whose deny_read masks
// files git tracks or that the repository's history holds. A host path
// that does not exist here is skipped: the manifest may be meant for
// another host.
func (c *cli) warnTrackedDenied(ctx context.Context, file string, p *policies.Policy) {
	for _, w := range p.Workspaces {
		tracked, err := trackedDenied(ctx, w)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			c.warn("%s: workspace %q: cannot tell which masked files git tracks: %v", file, w.HostPath, err)
			continue
		}
		hctx, cancel := context.WithTimeout(ctx, historyTimeout)
		committed, herr := committedDenied(hctx, w)
		cancel()
		var lines []string
		if len(tracked) > 0 {
			lines = append(lines, "git tracks masked files: "+listSome(tracked)+".")
		}
		if len(committed) > 0 {
			lines = append(lines, "the repository's history holds masked files: "+listSome(committed)+".")
		}
		if herr != nil {
			lines = append(lines, fmt.Sprintf("the repository's history was not checked (%v).", herr))
		}
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(c.stderr, "Warning: deny_read does not cover git history\n\n  on %s, workspace %q (target %s):\n  %s\n  %s.\n\n",
			file, w.HostPath, w.Target, strings.Join(lines, "\n  "), historyNote)
	}
}

// listSome joins the first ten paths and says how many more there are.
func listSome(paths []string) string {
	if len(paths) <= 10 {
		return strings.Join(paths, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(paths[:10], ", "), len(paths)-10)
}

func (c *cli) newFmtCommand() *cobra.Command {
	var write, check bool
	cmd := &cobra.Command{
		Use:   "fmt [flags] FILE|DIR|-...",
		Short: "Rewrite manifests in canonical HCL layout",
		Long: `Fmt prints each manifest in canonical layout. With -w it rewrites the
files that change; with --check it only lists them and exits 3 if there are
any. A directory stands for the *.hcl files in it; "-" reads standard input.
Files that do not parse are reported with diagnostics (exit 2).`,
		Example: `  airlock fmt task.hcl
  airlock fmt -w examples/
  airlock fmt --check examples/*.hcl`,
		Args: minArgs(1, "at least one FILE, DIR or -"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if write && check {
				return usageErrorf("-w and --check cannot be used together")
			}
			files, err := expandHCLArgs(args)
			if err != nil {
				return withCode(exitUsage, err)
			}
			if write && slices.Contains(files, "-") {
				return usageErrorf(`-w cannot rewrite standard input ("-")`)
			}
			failed, changed := false, false
			for _, path := range files {
				diff, err := c.fmtFile(path, write, check)
				if err != nil {
					c.report(err)
					failed = true
					continue
				}
				changed = changed || diff
			}
			switch {
			case failed:
				return exitCodeOnly(exitUsage)
			case check && changed:
				return exitCodeOnly(exitChanged)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVarP(&write, "write", "w", false, "rewrite files in place")
	cmd.Flags().BoolVar(&check, "check", false, "list files whose layout would change; exit 3 if any")
	return cmd
}

// fmtFile formats one file and reports whether its layout changed.
func (c *cli) fmtFile(path string, write, check bool) (bool, error) {
	var (
		src  []byte
		err  error
		mode os.FileMode
		name = path
	)
	if path == "-" {
		name = "<stdin>"
		src, err = io.ReadAll(c.stdin)
	} else {
		var fi os.FileInfo
		if fi, err = os.Stat(path); err == nil {
			mode = fi.Mode().Perm()
			src, err = os.ReadFile(path)
		}
	}
	if err != nil {
		return false, fmt.Errorf("reading manifest: %w", err)
	}
	out, err := policies.FormatSource(name, src)
	if err != nil {
		var diags *policies.DiagnosticsError
		if errors.As(err, &diags) {
			c.writeDiagnostics(diags)
			return false, exitCodeOnly(exitUsage)
		}
		return false, fmt.Errorf("%s: %w", name, err)
	}
	changed := !bytes.Equal(src, out)
	switch {
	case check:
		if changed {
			fmt.Fprintln(c.stdout, name)
		}
	case write:
		if changed {
			if err := os.WriteFile(path, out, mode); err != nil {
				return false, err
			}
		}
	default:
		if _, err := c.stdout.Write(out); err != nil {
			return false, err
		}
	}
	return changed, nil
}

// expandHCLArgs replaces each directory by the *.hcl files in it.
func expandHCLArgs(args []string) ([]string, error) {
	var files []string
	for _, a := range args {
		if a == "-" {
			files = append(files, a)
			continue
		}
		fi, err := os.Stat(a)
		if err != nil || !fi.IsDir() {
			files = append(files, a) // reported when it is read
			continue
		}
		matches, err := filepath.Glob(filepath.Join(a, "*.hcl"))
		if err != nil {
			return nil, err
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("%s: no *.hcl files", a)
		}
		files = append(files, matches...)
	}
	return files, nil
}

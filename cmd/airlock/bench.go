package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"
)

// benchProgram is the binary `airlock bench` runs. The benchmark runner
// links containerd's client, gRPC and the chart library; keeping them out of
// airlock keeps every other command quick to start.
const benchProgram = "airlock-bench"

// errNoBench explains a missing benchProgram.
var errNoBench = errors.New("airlock bench needs the airlock-bench binary next to airlock (make build puts it in _output/bin)")

func (c *cli) newBenchCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "Run the permission benchmark against real sandboxes",
		Long: `Bench runs AmPermBench's task families against airlock sandboxes, gate-only
versus perimeter-enforced, judges each action by its effect on a freshly reset
world, and writes the report (bench/SPEC.md). It is the airlock-bench program,
installed next to airlock; 'airlock bench --help' shows its flags.`,
		Example: `  airlock bench
  airlock bench --family cancel-jobs --mode gate-only --mode perimeter
  airlock bench --gate allow-all --gate rules:bench/runner/rules/example.rules --out results`,
		// airlock-bench parses everything, --help included; global flags
		// given before "bench" (--socket) reach it too.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.execBench(args)
		},
	}
	// `airlock help bench` shows airlock-bench's help as `airlock bench
	// --help` does, or this command's own when airlock-bench is missing.
	cmd.SetHelpFunc(func(cmd *cobra.Command, args []string) {
		if err := c.execBench([]string{"--help"}); err != nil {
			cmd.Root().HelpFunc()(cmd, args)
			c.report(err)
		}
	})
	return cmd
}

// execBench replaces this process with airlock-bench args: signals, the
// terminal and the exit status are then airlock-bench's own. When c.exec is
// syscall.Exec, it returns only if airlock-bench cannot be run.
func (c *cli) execBench(args []string) error {
	path, err := c.findBench()
	if err != nil {
		return withCode(exitNoBench, err)
	}
	argv := append([]string{path}, args...)
	if err := c.exec(path, argv, c.environ()); err != nil {
		return withCode(exitNoBench, fmt.Errorf("airlock bench: exec %s: %w", path, err))
	}
	return nil
}

// findBench returns airlock-bench from the directory of the running airlock
// (symlinks resolved), else from $PATH.
func (c *cli) findBench() (string, error) {
	where := "on $PATH"
	if self, err := c.executable(); err == nil {
		if self, err = filepath.EvalSymlinks(self); err == nil {
			dir := filepath.Dir(self)
			p := filepath.Join(dir, benchProgram)
			if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
				return p, nil
			}
			where = "in " + dir + " or " + where
		}
	}
	if p, err := c.lookPath(benchProgram); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: none %s", errNoBench, where)
}

package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/hostcheck"
	"github.com/airlock-sandbox/airlock/policies"
)

// doctorOutput is airlock doctor --json's document.
type doctorOutput struct {
	// OK is false when a check failed (warnings allowed).
	OK     bool               `json:"ok"`
	Checks []hostcheck.Result `json:"checks"`
}

func (c *cli) newDoctorCommand() *cobra.Command {
	var (
		paths   []string
		binDir  string
		runtime string
		config  string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "doctor [--config FILE] [--path DIR]... [--bin-dir DIR] [--runtime runc|crun] [--json]",
		Short: "Check the kernel and host for what airlock uses",
		Long: `doctor checks, on this machine and without the daemon, the kernel and host
features airlock uses: cgroups, overlayfs, tmpfs extended attributes, idmapped
mounts (on each --path), user and network namespaces, nftables, fanotify
permission events, loop devices, seccomp, and the containerd, runc and crun
in --bin-dir; with --runtime crun, also the cgroup layout crun needs. With
--config, airlockd's configuration file names them: its bin_dir, its
runtime, and its admission policy's host_paths as paths. Each check
exercises the feature and leaves nothing behind. It
prints one line per check, and under each failure what to do. Some checks
need root; without it they are reported as warnings.

It exits 0 when nothing failed (warnings allowed), 1 otherwise.`,
		Example: `  airlock doctor
  airlock doctor --config /etc/airlock/airlockd.hcl
  airlock doctor --path /srv/repos --path /home
  airlock doctor --json`,
		Args: exactArgs(0, "no arguments"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			cfg := hostcheck.Config{Paths: paths, BinDir: binDir, Runtime: runtime}
			if config != "" {
				dp, err := policies.ReadDaemonPaths(config)
				if diags := (*policies.DiagnosticsError)(nil); errors.As(err, &diags) {
					c.writeDiagnostics(diags)
					return exitCodeOnly(exitUsage)
				} else if err != nil {
					return usageErrorf("--config: %v", err)
				}
				if !cmd.Flags().Changed("bin-dir") && dp.BinDir != "" {
					cfg.BinDir = dp.BinDir
				}
				if !cmd.Flags().Changed("path") {
					cfg.Paths = dp.HostPaths
				}
				if !cmd.Flags().Changed("runtime") && dp.Runtime != "" {
					cfg.Runtime = dp.Runtime
				}
			}
			if !cmd.Flags().Changed("bin-dir") && cfg.BinDir == "" {
				cfg.BinDir = c.ownDir()
				if cfg.BinDir == "" {
					c.warn("cannot find the airlock binary's directory: containerd and runc not checked (use --bin-dir)")
				}
			}
			rs := hostcheck.Run(cmd.Context(), cfg)
			if n := needRoot(rs); n > 0 {
				c.warn("not running as root: %d checks that need root were not run", n)
			}
			if asJSON {
				if err := c.printJSON(doctorOutput{OK: !hostcheck.Failed(rs), Checks: rs}); err != nil {
					return err
				}
			} else {
				c.printDoctor(rs)
			}
			if hostcheck.Failed(rs) {
				return exitCodeOnly(exitFailure)
			}
			return nil
		}),
	}
	cmd.Flags().StringArrayVar(&paths, "path", nil, "check idmapped mounts on `DIR`'s filesystem, where workspaces live (repeatable)")
	cmd.Flags().StringVar(&binDir, "bin-dir", "", "`DIR` holding containerd, runc and crun (default: the airlock binary's directory, as make build and make deps lay out _output/bin)")
	cmd.Flags().StringVar(&runtime, "runtime", "", "the OCI runtime airlockd runs sessions on (`NAME`: runc or crun, as airlockd --runtime); crun adds the check of the cgroup layout it needs")
	cmd.Flags().StringVar(&config, "config", "", "airlockd's configuration `FILE`: its bin_dir is --bin-dir's default and its admission policy's host_paths are --path's")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}

// ownDir is the directory of the running airlock (symlinks resolved), or
// "" when it cannot be found.
func (c *cli) ownDir() string {
	self, err := c.executable()
	if err != nil {
		return ""
	}
	if self, err = filepath.EvalSymlinks(self); err != nil {
		return ""
	}
	return filepath.Dir(self)
}

// printDoctor prints one line per check, and each warning's or failure's
// fix indented below it (but not "run as root" for every check).
func (c *cli) printDoctor(rs []hostcheck.Result) {
	width := 0
	for _, r := range rs {
		width = max(width, len(r.Name))
	}
	for _, r := range rs {
		fmt.Fprintf(c.stdout, "%-4s  %-*s  %s\n", strings.ToUpper(r.Status), width, r.Name, r.Detail)
		if r.Fix != "" && r.Detail != hostcheck.NeedsRoot {
			fmt.Fprintf(c.stdout, "      fix: %s\n", r.Fix)
		}
	}
}

func needRoot(rs []hostcheck.Result) int {
	n := 0
	for _, r := range rs {
		if r.Detail == hostcheck.NeedsRoot {
			n++
		}
	}
	return n
}

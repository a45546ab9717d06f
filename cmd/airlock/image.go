package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/api"
)

func (c *cli) newImageCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image COMMAND",
		Short: "Manage the daemon's images",
		Long: `Sessions run images from airlockd's own store; images come from
archives (airlock pulls nothing from registries).`,
		Example: `  airlock image import agent.tar --name airlock/agent:bookworm
  airlock image ls`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("unknown command %q for %q (see '%s --help')", args[0], cmd.CommandPath(), cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(c.newImageImportCommand(), c.newImageLsCommand())
	return cmd
}

func (c *cli) newImageImportCommand() *cobra.Command {
	var (
		name   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "import [flags] FILE.tar|-",
		Short: "Import an OCI or Docker image archive",
		Long: `Import streams an OCI image layout or "docker save" archive to the daemon
("-" reads standard input) and prints the images it contained. --name tags
the image (the archive must then hold exactly one).`,
		Example: `  airlock image import agent.tar
  docker save agent:latest | airlock image import - --name airlock/agent:bookworm`,
		Args: exactArgs(1, "one archive FILE, or - for standard input"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			var r io.Reader = c.stdin
			if args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				r = f
			}
			imgs, err := c.client().ImportImage(cmd.Context(), name, r)
			if err != nil {
				return err
			}
			if asJSON {
				return c.printJSON(nonNil(imgs))
			}
			for _, img := range imgs {
				fmt.Fprintf(c.stdout, "Imported %s (%s)\n", img.Name, img.Digest)
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&name, "name", "", "tag the imported image with this reference")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the imported images as a JSON array")
	return cmd
}

func (c *cli) newImageLsCommand() *cobra.Command {
	var quiet, asJSON, noTrunc bool
	cmd := &cobra.Command{
		Use:     "ls [flags]",
		Aliases: []string{"list"},
		Short:   "List images",
		Long: `Ls lists the images in the daemon's store. AGENT is the coding agent an
agent image holds and its version (images/claude-code, images/codex), from
the image's dev.airlock.agent.* labels; "-" for other images.`,
		Example: `  airlock image ls
  airlock image ls --json | jq -r '.[].name'`,
		Args: exactArgs(0, "no arguments"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			imgs, err := c.client().ListImages(cmd.Context())
			if err != nil {
				return err
			}
			slices.SortStableFunc(imgs, func(a, b api.Image) int { return strings.Compare(a.Name, b.Name) })
			switch {
			case asJSON:
				return c.printJSON(nonNil(imgs))
			case quiet:
				for _, img := range imgs {
					fmt.Fprintln(c.stdout, img.Name)
				}
				return nil
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 8, 3, ' ', 0)
			fmt.Fprintln(tw, "NAME\tAGENT\tDIGEST\tSIZE\tCREATED")
			for _, img := range imgs {
				digest := img.Digest
				if !noTrunc {
					digest = shortDigest(digest)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", img.Name, imageAgent(img), digest, humanSize(img.Size), ago(c.now(), img.Created))
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only names")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the images as a JSON array")
	cmd.Flags().BoolVar(&noTrunc, "no-trunc", false, "print full digests")
	return cmd
}

// imageAgent is the agent an image holds and its version, from the image's
// labels ("claude-code 2.1.328"), or "-".
func imageAgent(img api.Image) string {
	name, version := img.Labels[api.LabelAgentName], img.Labels[api.LabelAgentVersion]
	switch {
	case name == "":
		return "-"
	case version == "":
		return name
	}
	return name + " " + version
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

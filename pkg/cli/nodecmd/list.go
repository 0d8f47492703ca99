// Package nodecmd holds rdma-cdi's commands, the operator's CLI and the
// node agent, each a constructor cmd/rdma-cdi lists.
package nodecmd

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/rdma-cdi/rdma-cdi/pkg/cli"
	"github.com/rdma-cdi/rdma-cdi/pkg/greyhealth"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
)

// List is `rdma-cdi list`: the node's devices, ports, netdevs and GID tables.
func List(app *cli.App) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "Show RDMA devices, ports, netdevs and GID tables (ibdev2netdev + show_gids)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := app.Discover()
			if err != nil {
				return err
			}
			sample, errs := greyhealth.Sample(greyhealth.NewReader(app.Roots.Sysfs), res.Node, time.Now())
			for _, err := range errs {
				app.Log.Debug(err)
			}
			links := newLinkView(sample, greyhealth.Policy(app.Config.Health))
			if asJSON {
				return writeJSON(app.Stdout, links.node(res.Node))
			}
			if len(res.Node.Devices) == 0 {
				fmt.Fprintf(app.Stdout, "no RDMA devices found under %s/class/infiniband\n", app.Roots.Sysfs)
				return nil
			}
			return writeListing(app.Stdout, res.Node, links)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the whole node model as JSON, with each HCA's PCIe link and each port's width")
	return cmd
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeListing prints one ibdev2netdev-style line per port (a degraded
// one marked), each HCA's PCIe link, then the show_gids table of every
// non-empty GID.
func writeListing(w io.Writer, node model.Node, links linkView) error {
	for _, d := range node.Devices {
		for _, p := range d.Ports {
			fmt.Fprintf(w, "%s port %d ==> %s (%s) %s %s %s%s%s\n", d.Name, p.Number, orNone(p.NetDev),
				netdevState(node, p.NetDev), p.State, p.LinkLayer, p.Rate, sriovRole(node, d), degradedMark(links.degraded(d.Name, p.Number)))
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	fmt.Fprintln(tw, "DEV\tPCI\tPCIE LINK\tMAX")
	fmt.Fprintln(tw, "---\t---\t---------\t---")
	for _, d := range node.Devices {
		l, ok := links.pci[d.Name]
		if !ok {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\n", d.Name, orDash(d.PCIAddress))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s%s\n", d.Name, d.PCIAddress, pcieLink(l.Speed, l.Width), pcieLink(l.MaxSpeed, l.MaxWidth),
			degradedMark(links.degraded(d.Name, 0)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 8, 1, ' ', 0)
	fmt.Fprintln(tw, "DEV\tPORT\tINDEX\tGID\tIPv4\tVER\tDEV")
	fmt.Fprintln(tw, "---\t----\t-----\t---\t------------\t---\t---")
	for _, d := range node.Devices {
		for _, p := range d.Ports {
			for _, g := range p.GIDs {
				ipv4 := ""
				if v4, ok := g.IPv4(); ok {
					ipv4 = v4.String()
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", d.Name, p.Number, g.Index, fullGID(g), ipv4, gidVersion(g.Type), g.NetDev)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if node.RDMACM != nil {
		fmt.Fprintf(w, "\nrdma_cm: %s (%d:%d)\n", node.RDMACM.Path, node.RDMACM.Major, node.RDMACM.Minor)
	}
	if node.DefaultRouteNetDev != "" {
		fmt.Fprintf(w, "default route: %s\n", node.DefaultRouteNetDev)
	}
	return nil
}

// sriovRole tags an SR-IOV function: " [PF, N VFs]" or " [VF of PF]",
// the PF by name when it is an RDMA device here, else by PCI address.
func sriovRole(node model.Node, d model.Device) string {
	switch {
	case d.IsVF():
		if pf, ok := node.PFOf(d); ok {
			return " [VF of " + pf.Name + "]"
		}
		return " [VF of " + d.PhysFn + "]"
	case d.NumVFs > 0:
		return fmt.Sprintf(" [PF, %d VFs]", d.NumVFs)
	}
	return ""
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}

func netdevState(node model.Node, name string) string {
	nd, ok := node.NetDevByName(name)
	switch {
	case name == "" || !ok:
		return "?"
	case nd.Carrier:
		return "Up"
	}
	return "Down"
}

// fullGID prints a GID with all eight groups zero-padded, as sysfs and
// show_gids do.
func fullGID(g model.GID) string {
	b := g.GID.As16()
	out := make([]byte, 0, 39)
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			out = append(out, ':')
		}
		out = append(out, fmt.Sprintf("%02x%02x", b[i], b[i+1])...) //nolint:gosec // b has 16 bytes, i+1 is at most 15
	}
	return string(out)
}

func gidVersion(t model.GIDType) string {
	if v := t.RoCEVersion(); v > 0 {
		return "v" + strconv.Itoa(v)
	}
	return string(t)
}

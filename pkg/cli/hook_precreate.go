package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/spf13/cobra"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/hookname"
	"github.com/rdma-cdi/rdma-cdi/pkg/hooks"
	"github.com/rdma-cdi/rdma-cdi/pkg/nccl"
	"github.com/rdma-cdi/rdma-cdi/pkg/ociedit"
	"github.com/rdma-cdi/rdma-cdi/pkg/rlimit"
)

// newPrecreateHook is podman's precreate stage: the proposed config.json
// comes on stdin and what we print replaces it. A container that asked
// for nothing gets its input bytes back unchanged.
func newPrecreateHook(app *App) *cobra.Command {
	return &cobra.Command{
		Use:   string(hookname.Precreate),
		Short: "podman precreate hook: apply the container's RDMA request to the config.json on stdin, print it on stdout",
		Long: `Reads the OCI config.json that podman proposes on stdin and prints the config to use
on stdout. A container asks for RDMA with ` + ociedit.EnvDevices + `=all|NAME,... in its env, the
annotation <vendor>/devices (same syntax) or cdi.k8s.io/* annotations naming <vendor>/<class>=NAME;
devices podman already injected (--device <vendor>/<class>=NAME) count as asked for. For those
the CDI edits are applied, CAP_IPC_LOCK added, RLIMIT_MEMLOCK set and the NCCL env added where
the user did not set it. Anything else is printed back byte for byte.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			app.logToFile(app.Config.Hooks.LogFile)
			app.reportConfig(app.Log)
			in, err := io.ReadAll(cmd.InOrStdin())
			if err != nil {
				return fmt.Errorf("precreate: reading config.json from stdin: %w", err)
			}
			out, _, err := app.editOCIConfig(in, "config.json on stdin")
			if err != nil {
				// podman shows only the exit status: the log file has the reason.
				app.Log.Errorf("precreate: %v", err)
				return fmt.Errorf("precreate: %w", err)
			}
			_, err = app.Stdout.Write(out)
			return err
		},
	}
}

// logToFile sends the log to path as well as where it goes now; a file
// that cannot be opened is a debug message, never a failure.
func (a *App) logToFile(path string) {
	if path == "" {
		return
	}
	f, err := hooks.OpenLogFile(path)
	if err != nil {
		a.Log.Debugf("log file: %v", err)
		return
	}
	a.Log.SetOutput(io.MultiWriter(a.Log.Out, f))
}

// editOCIConfig applies the RDMA request of the config in data. It returns
// data itself when nothing was asked for or nothing had to change, so the
// caller writes back the original bytes. what names the input in errors.
func (a *App) editOCIConfig(data []byte, what string) ([]byte, bool, error) {
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, false, fmt.Errorf("%s is not a valid OCI config, so its RDMA request (if any) cannot be read: %w", what, err)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(a.Config.CDI.SpecDir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, false, err
	}
	ed := ociedit.Editor{Cache: cache, Vendor: a.Config.CDI.Vendor, Class: a.Config.CDI.Class}
	req, err := ed.Request(&spec)
	if err == nil && req.Empty() {
		a.Log.Debugf("%s: no RDMA request; passed through unchanged", what)
		return data, false, nil
	}
	// The container asked for something: an unusable config is the cause
	// to report first (it also decided where the request was looked up).
	if cerr := a.configBlocksRDMA(); cerr != nil {
		return nil, false, cerr
	}
	if err != nil {
		return nil, false, err
	}
	// Only a request costs the memlock probe, and only a request can be
	// refused for a --memlock the config load did not validate.
	if ed.Memlock, err = a.applicableMemlock(what); err != nil {
		return nil, false, err
	}
	changed, err := ed.Edit(&spec, req, a.ncclVars(req.Devices))
	if err != nil {
		return nil, false, err
	}
	if !changed {
		a.Log.Infof("%s: RDMA devices %s (from %s) already in place", what, strings.Join(req.Devices, ","), strings.Join(req.Sources, ", "))
		return data, false, nil
	}
	out, err := ociedit.Encode(data, &spec)
	if err != nil {
		return nil, false, err
	}
	a.Log.Infof("%s: gave RDMA devices %s (from %s), CAP_IPC_LOCK, memlock %s", what, strings.Join(req.Devices, ","), strings.Join(req.Sources, ", "), rlimit.String(ed.Memlock))
	return out, true, nil
}

// applicableMemlock is hooks.memlock, or the hard limit where the runtime
// could not set hooks.memlock (rlimit.ApplicableMemlock), logged as such.
func (a *App) applicableMemlock(what string) (uint64, error) {
	want, err := config.ParseMemlock(a.Config.Hooks.Memlock)
	if err != nil {
		return 0, fmt.Errorf("hooks.memlock: %w", err)
	}
	memlock, why := rlimit.ApplicableMemlock(want)
	if why != "" {
		a.Log.Warnf("%s: %s", what, why)
	}
	return memlock, nil
}

// ncclVars computes the NCCL settings for the devices a container gets.
// Discovery trouble costs the NCCL env, not the container.
func (a *App) ncclVars(devices []string) []nccl.Var {
	if a.Config.NCCL.Delivery == config.DeliveryNone {
		return nil
	}
	res, err := a.Discover()
	if err != nil {
		a.Log.Warnf("NCCL settings not added: discovery failed: %v", err)
		return nil
	}
	s := nccl.Compute(res.Node, a.Config.NCCL, nccl.Scope{Devices: devices})
	for _, w := range s.Warnings {
		a.Log.Warn(w)
	}
	return s.Vars
}

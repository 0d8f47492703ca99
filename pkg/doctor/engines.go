package doctor

// engine is all doctor knows of one container engine: how to find it,
// whose memlock limit its containers inherit and where its CDI switch is.
// Every check reads knownEngines, so an engine is added or corrected in
// one place.
type engine struct {
	// name is the engine as doctor prints it (cdi-NAME).
	name string
	// binaries are looked up in PATH in this order; the first found is
	// asked --version.
	binaries []string
	// processes are the running processes whose RLIMIT_MEMLOCK containers
	// inherit.
	processes []string
	// unit is the systemd unit whose LimitMEMLOCK containers inherit (""
	// for none).
	unit string
	// configPath, under the host root, holds the engine's CDI switch,
	// which parseCDISwitch reads ("" when the release alone decides).
	configPath     string
	parseCDISwitch func(data []byte) (on *bool, errText string)
}

// knownEngines are the engines doctor looks for, in the order it reports
// them.
var knownEngines = []engine{
	{
		name:           "docker",
		binaries:       []string{"dockerd", "docker"},
		processes:      []string{"dockerd"},
		unit:           "docker.service",
		configPath:     "etc/docker/daemon.json",
		parseCDISwitch: DockerCDIFeature,
	},
	{
		name:           "containerd",
		binaries:       []string{"containerd"},
		processes:      []string{"containerd"},
		unit:           "containerd.service",
		configPath:     "etc/containerd/config.toml",
		parseCDISwitch: ContainerdCDI,
	},
	{
		name:      "crio",
		binaries:  []string{"crio"},
		processes: []string{"crio"},
		unit:      "crio.service",
	},
	{
		name:      "podman",
		binaries:  []string{"podman"},
		processes: []string{"podman"},
		// podman has no daemon whose unit its containers inherit from.
	},
}

// processNames are the table's engine processes, in table order.
func processNames() []string {
	var out []string
	for _, e := range knownEngines {
		out = append(out, e.processes...)
	}
	return out
}

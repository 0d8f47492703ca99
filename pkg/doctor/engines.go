package doctor

// engine is all doctor knows of one container engine: how to find it,
// whose memlock limit its containers inherit, where its CDI switch is and
// what each release does with CDI. Every check reads knownEngines, so an
// engine is added or corrected in one place.
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
	// cdiReleases say what releases do with CDI, oldest first: each entry
	// holds from its release until the next; a release older than the
	// first has no CDI support.
	cdiReleases []cdiRelease
	// cdiOffFix is the fix when the engine's CDI is off.
	cdiOffFix string
}

// cdiRelease is what an engine does with CDI from release from on.
type cdiRelease struct {
	from semver
	// defaultOn is whether CDI is on without configuration.
	defaultOn bool
	// maxSpec is the highest cdiVersion it reads ("" = not known).
	maxSpec string
}

// knownEngines are the engines doctor looks for, in the order it reports
// them. The releases encode what each accepts (REFERENCES §4).
var knownEngines = []engine{
	{
		name:           "docker",
		binaries:       []string{"dockerd", "docker"},
		processes:      []string{"dockerd"},
		unit:           "docker.service",
		configPath:     "etc/docker/daemon.json",
		parseCDISwitch: DockerCDIFeature,
		cdiReleases: []cdiRelease{
			{from: semver{25, 0, 0}, maxSpec: "0.6.0"},
			{from: semver{28, 2, 0}, defaultOn: true, maxSpec: "1.0.0"},
			{from: semver{29, 0, 0}, defaultOn: true, maxSpec: "1.1.0"},
		},
		cdiOffFix: `set "features": {"cdi": true} in /etc/docker/daemon.json and restart dockerd`,
	},
	{
		name:           "containerd",
		binaries:       []string{"containerd"},
		processes:      []string{"containerd"},
		unit:           "containerd.service",
		configPath:     "etc/containerd/config.toml",
		parseCDISwitch: ContainerdCDI,
		cdiReleases: []cdiRelease{
			{from: semver{1, 7, 0}, maxSpec: "0.5.0"},
			{from: semver{2, 0, 0}, defaultOn: true, maxSpec: "0.8.0"},
			{from: semver{2, 1, 0}, defaultOn: true, maxSpec: "1.0.0"},
			{from: semver{2, 2, 0}, defaultOn: true, maxSpec: "1.1.0"},
		},
		cdiOffFix: `set enable_cdi = true under [plugins."io.containerd.grpc.v1.cri"] and restart containerd`,
	},
	{
		name:      "crio",
		binaries:  []string{"crio"},
		processes: []string{"crio"},
		unit:      "crio.service",
		// From the CDI library each release vendors (its go.mod); 1.34 is
		// tested (TestCRIOSpecVersions). 1.31-1.33 are not known here.
		cdiReleases: []cdiRelease{
			{from: semver{1, 23, 0}, defaultOn: true, maxSpec: "0.3.0"},
			{from: semver{1, 25, 0}, defaultOn: true, maxSpec: "0.5.0"},
			{from: semver{1, 28, 0}, defaultOn: true, maxSpec: "0.6.0"},
			{from: semver{1, 30, 0}, defaultOn: true, maxSpec: "0.7.0"},
			{from: semver{1, 31, 0}, defaultOn: true},
			{from: semver{1, 34, 0}, defaultOn: true, maxSpec: "1.0.0"},
		},
		cdiOffFix: "upgrade CRI-O to 1.23 or later",
	},
	{
		name:      "podman",
		binaries:  []string{"podman"},
		processes: []string{"podman"},
		// podman has no daemon whose unit its containers inherit from.
		cdiReleases: []cdiRelease{
			{from: semver{4, 1, 0}, defaultOn: true, maxSpec: "0.5.0"},
			{from: semver{4, 7, 0}, defaultOn: true, maxSpec: "0.6.0"},
			{from: semver{5, 2, 0}, defaultOn: true, maxSpec: "0.8.0"},
			{from: semver{5, 5, 0}, defaultOn: true, maxSpec: "1.0.0"},
		},
		cdiOffFix: "upgrade podman to 4.1 or later",
	},
}

// engineNames are the table's engines, in table order.
func engineNames() []string {
	var out []string
	for _, e := range knownEngines {
		out = append(out, e.name)
	}
	return out
}

// processNames are the table's engine processes, in table order.
func processNames() []string {
	var out []string
	for _, e := range knownEngines {
		out = append(out, e.processes...)
	}
	return out
}

// engineNamed is the table's entry for name (nil for an engine doctor
// does not know).
func engineNamed(name string) *engine {
	for i := range knownEngines {
		if knownEngines[i].name == name {
			return &knownEngines[i]
		}
	}
	return nil
}

// cdiAt is what release v does with CDI; ok is false when it has no CDI
// support (older than the table's first release, or an engine doctor
// does not know).
func (e *engine) cdiAt(v semver) (r cdiRelease, ok bool) {
	if e == nil {
		return r, false
	}
	for _, rel := range e.cdiReleases {
		if v.Less(rel.from) {
			break
		}
		r, ok = rel, true
	}
	return r, ok
}

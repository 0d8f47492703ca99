package dradriver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/rdma-cdi/rdma-cdi/pkg/apis"
	"github.com/rdma-cdi/rdma-cdi/pkg/cdispec"
	"github.com/rdma-cdi/rdma-cdi/pkg/config"
	"github.com/rdma-cdi/rdma-cdi/pkg/health"
	"github.com/rdma-cdi/rdma-cdi/pkg/metrics"
	"github.com/rdma-cdi/rdma-cdi/pkg/model"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/attach"
	"github.com/rdma-cdi/rdma-cdi/pkg/podnetwork/cniipam"
	"github.com/rdma-cdi/rdma-cdi/pkg/specio"
	"github.com/rdma-cdi/rdma-cdi/pkg/topology"
)

// Options are what a Driver is built from (New).
type Options struct {
	// Name is the driver name, the CDI vendor (rdma.example.com). Required.
	Name string
	// NodeName is this node's name in the API server, and the name of the
	// pool of its ResourceSlice. Required.
	NodeName string
	// Client talks to the API server; Run needs it.
	Client kubernetes.Interface
	// PluginDir is the kubelet's plugins directory (/var/lib/kubelet/plugins);
	// the driver's socket goes in PluginDir/Name.
	PluginDir string
	// RegistrarDir is the kubelet's plugin registration directory
	// (/var/lib/kubelet/plugins_registry).
	RegistrarDir string
	// ExtendedResource, when set, is the extended resource one of the
	// driver's DeviceClasses should serve; Run logs whether it does.
	ExtendedResource string
	// Metrics, when set, counts slice publications and learns the pods
	// each prepared claim's HCAs are reserved for.
	Metrics *metrics.Exporter
	// DeviceMetadata gives each claim's containers a file describing their
	// HCAs (metadata.go), through CDI specs the helper writes in CDIDir
	// ("" for its default, /var/run/cdi): the directory of the driver's
	// own spec, which the runtimes read.
	DeviceMetadata bool
	CDIDir         string
	// RemoveSpecOnExit removes the claim class's spec (writeClaimSpec)
	// when Run ends, as the agent's --remove-on-exit does its HCA spec: an
	// uninstalled driver leaves no spec behind.
	RemoveSpecOnExit bool
	// Log, when nil, logs nothing.
	Log logrus.FieldLogger
}

// Driver is the DRA kubelet plugin of one node. It registers with the
// kubelet once the first Update has come (the spec its CDI names point
// into exists by then), publishes the node's ResourceSlice on every Update,
// and prepares claims from the latest inventory. Build it with New (its
// options are embedded, so a literal cannot set them).
type Driver struct {
	Options
	// PodNetwork, with pod networking on, gives pods the RoCE interfaces
	// of their claims' HCAs (networker.New over PlanPod); Run serves it
	// once the prepared claims are restored. Set before Run, if at all:
	// the service is built over the driver's own methods.
	PodNetwork PodNetwork

	ready chan struct{} // closed by the first Update
	mu    sync.Mutex
	// inv is base with the grey conditions folded in (Inventory.WithGrey).
	inv      Inventory
	base     Inventory
	grey     map[string][]health.Condition // by HCA, as SetGrey gave them
	node     model.Node
	ncclCfg  config.NCCL
	podNet   config.PodNetwork // movable and move_keeps_addresses
	kind     string            // CDI kind of the spec's devices, vendor/class
	effect   config.TaintEffect
	features Features // what the API server keeps, probed before the first publish
	known    map[string]resourceapi.Device
	problems map[string]health.Problem // as last published
	degraded map[string]health.Problem // as last published
	// pubMu orders publications: each publishes the inventory current
	// when it runs, so the last one is the latest.
	pubMu sync.Mutex
	// health is every device's health with its start, for claim statuses.
	health map[string]DeviceHealth
	// healthChanged is closed and replaced when problems change; the
	// kubelet's health streams wait on it.
	healthChanged chan struct{}
	helper        *kubeletplugin.Helper
	holders       holders
	// prepared mirrors the checkpoint file in dataDir (none while dataDir
	// is "": the driver has not started).
	prepared map[types.UID]PreparedClaim
	dataDir  string
	statuses *claimStatuses
	fail     context.CancelCauseFunc
	// nodeIPs are the Node's addresses (followNodeIPs): a netdev holding
	// one is never moved into a pod, nor any before they are known.
	nodeIPs      []netip.Addr
	nodeIPsKnown bool
	// nodeIPsMissed counts the reads failed since the last that succeeded.
	nodeIPsMissed int
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// New builds the driver of node opts.NodeName for driver opts.Name; both
// are required. Nothing is started: Run serves it.
func New(opts Options) (*Driver, error) {
	if opts.Name == "" {
		return nil, errors.New("DRA driver: no driver name (cdi.vendor)")
	}
	if opts.NodeName == "" {
		return nil, errors.New("DRA driver: no node name")
	}
	if opts.Log == nil {
		quiet := logrus.New()
		quiet.SetOutput(io.Discard)
		opts.Log = quiet
	}
	return &Driver{
		Options:       opts,
		ready:         make(chan struct{}),
		holders:       holders{},
		prepared:      map[types.UID]PreparedClaim{},
		known:         map[string]resourceapi.Device{},
		statuses:      newClaimStatuses(),
		healthChanged: make(chan struct{}),
	}, nil
}

// Update takes a new view of the node (after each good spec generation)
// and publishes it.
func (d *Driver) Update(node model.Node, cfg config.Config) {
	rails, _ := topology.Rails(node, cfg.Topology) // the agent logs why rails are missing
	inv := BuildInventory(node, cfg.NCCL, rails)
	for _, w := range inv.Warnings {
		d.Log.Warn(w)
	}
	d.mu.Lock()
	d.base, d.kind, d.effect = inv, cfg.CDI.Vendor+"/"+cfg.CDI.Class, cfg.DRA.UnhealthyTaintEffect
	d.node, d.ncclCfg, d.podNet = node, cfg.NCCL, cfg.PodNetwork
	helper := d.applyGrey()
	d.mu.Unlock()
	d.statuses.refresh()
	select {
	case <-d.ready:
	default:
		close(d.ready)
	}
	if helper != nil {
		d.publish(helper)
	}
}

// SetGrey takes the grey conditions of the node's HCAs (by HCA name, the
// agent's sampler) and publishes what they change: taints, the claims'
// Healthy conditions, the kubelet's health stream.
func (d *Driver) SetGrey(grey map[string][]health.Condition) {
	d.mu.Lock()
	d.grey = grey
	helper := d.applyGrey()
	d.mu.Unlock()
	d.statuses.refresh()
	if helper != nil {
		d.publish(helper)
	}
}

// applyGrey folds the grey conditions into the inventory and tracks the
// devices' health; it returns the helper to publish with (nil before Run
// started it). d.mu is held.
func (d *Driver) applyGrey() *kubeletplugin.Helper {
	if d.base.IBDevs == nil { // no Update yet
		return nil
	}
	d.inv = d.base.WithGrey(d.grey)
	d.health = TrackHealth(d.health, d.inv, metav1.Now())
	return d.helper
}

// publish publishes the current inventory.
func (d *Driver) publish(h *kubeletplugin.Helper) {
	d.pubMu.Lock()
	defer d.pubMu.Unlock()
	d.mu.Lock()
	shown := d.shown()
	devices, problems := SliceDevices(d.inv, d.known, shown)
	changes := HealthChanges(d.problems, problems, shown)
	d.setProblems(problems, d.inv.Degraded)
	d.mu.Unlock()
	for _, c := range changes {
		d.Log.Warn(c)
	}
	err := h.PublishResources(context.Background(), resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{d.NodeName: {Slices: []resourceslice.Slice{{Devices: devices}}}},
	})
	d.Metrics.SlicePublished(err)
	if err != nil {
		d.Log.Errorf("publishing the ResourceSlice: %v", err)
		return
	}
	d.Log.Infof("ResourceSlice of node %s: %d devices", d.NodeName, len(devices))
}

// shown is how the slice shows the devices' health and sharing on this
// API server. d.mu is held.
func (d *Driver) shown() Health {
	return Health{Driver: d.Name, Taints: d.features.DeviceTaints, Effect: d.effect, Sharing: d.features.ConsumableCapacity, Lists: d.features.ListAttributes}
}

// setProblems records the devices' health as published and wakes the
// health streams when it changed. d.mu is held.
func (d *Driver) setProblems(problems, degraded map[string]health.Problem) {
	if d.problems == nil || !maps.Equal(d.problems, problems) || !maps.Equal(d.degraded, degraded) {
		close(d.healthChanged)
		d.healthChanged = make(chan struct{})
	}
	d.problems, d.degraded = problems, degraded
}

// Run waits for the first Update, registers with the kubelet and serves
// until ctx ends or a fatal error; then it unregisters and removes its
// sockets.
func (d *Driver) Run(ctx context.Context) error {
	if d.Client == nil {
		return fmt.Errorf("DRA driver %s: no Kubernetes client", d.Name)
	}
	select {
	case <-ctx.Done():
		return nil
	case <-d.ready:
	}
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	dataDir := d.DataDir()
	// The helper listens there but does not create it.
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return fmt.Errorf("DRA plugin directory: %w", err)
	}
	d.mu.Lock()
	d.fail = fail
	d.restore(dataDir)
	d.mu.Unlock()
	// The kubelet may start a claim's pod once the driver registers, before
	// the NRI plugin has synchronized with the runtime: the hook refuses
	// that pod's containers until its sandbox is listed, and the list is
	// on disk already (networker.New wrote it, before Run).
	if d.PodNetwork != nil {
		d.startPodNetwork(ctx)
	}
	// A prepare answer may name a claim device: its spec is on disk
	// before the driver registers.
	if err := d.writeClaimSpec(); err != nil {
		return err
	}
	if d.RemoveSpecOnExit {
		defer d.removeClaimSpec()
	}
	helper, err := kubeletplugin.Start(ctx, d, append([]kubeletplugin.Option{
		kubeletplugin.DriverName(d.Name),
		kubeletplugin.NodeName(d.NodeName),
		kubeletplugin.KubeClient(d.Client),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.RegistrarDirectoryPath(d.RegistrarDir),
	}, metadataOptions(d.DeviceMetadata, d.CDIDir)...)...)
	if err != nil {
		return fmt.Errorf("starting the DRA kubelet plugin %s: %w", d.Name, err)
	}
	features, err := ProbeFeatures(ctx, d.Client, d.Name, d.NodeName)
	if err != nil {
		d.Log.Warnf("%v; what it did not answer is taken as off", err)
	}
	d.Log.Infof("API server DRA features: %s", features)
	if !features.ConsumableCapacity {
		d.Log.Infof("HCAs are not offered for sharing: this API server has no consumable capacity (DRAConsumableCapacity, on by default from 1.36); the shared DeviceClasses match no device")
	}
	if !features.ListAttributes {
		d.Log.Infof("%s is published as an int: this API server drops list attributes (DRAListTypeAttributes, alpha, off by default, from 1.36)", apis.StdAttrNUMANode)
	}
	d.mu.Lock()
	d.helper, d.features = helper, features
	d.mu.Unlock()
	d.publish(helper)
	d.Log.Infof("DRA driver %s serving node %s at %s", d.Name, d.NodeName, dataDir)
	go d.reportExtendedResource(ctx)
	go d.statuses.run(ctx, d.deviceStatuses, d.writeStatus, d.Log)
	<-ctx.Done()
	helper.Stop()
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// defaultCDIDir is where the runtimes read dynamic CDI specs, the
// helper's default for CDIDir.
const defaultCDIDir = "/var/run/cdi"

// writeClaimSpec writes the claim class's CDI spec (cdispec.RenderClaimSpec,
// vendor d.Name) into CDIDir as JSON, unless it is there already: the
// runtimes resolve the claim devices a prepare answer names from it.
func (d *Driver) writeClaimSpec() error {
	spec, err := cdispec.RenderClaimSpec(d.Name)
	if err != nil {
		return err
	}
	data, err := cdispec.Marshal(spec, "json")
	if err != nil {
		return err
	}
	if _, err := specio.WriteIfChanged(d.claimSpecPath(), data, specio.DefaultMode); err != nil {
		return fmt.Errorf("the claim CDI spec: %w", err)
	}
	return nil
}

// claimSpecPath is where writeClaimSpec writes.
func (d *Driver) claimSpecPath() string {
	dir := d.CDIDir
	if dir == "" {
		dir = defaultCDIDir
	}
	return specio.DefaultPath(dir, d.Name, apis.ClaimClass, "json")
}

// removeClaimSpec removes the claim class's spec; a container that a
// claim device would have opted out of the host's NCCL plugins cannot
// start while no driver runs anyway (its HCAs' spec is gone too).
func (d *Driver) removeClaimSpec() {
	path := d.claimSpecPath()
	if err := specio.Remove(path); err != nil {
		d.Log.Warnf("removing the claim spec %s on exit: %v", path, err)
		return
	}
	d.Log.Infof("claim spec %s removed on exit", path)
}

// PrepareResourceClaims answers each claim with the CDI names of its HCAs,
// once the checkpoint holds it: a claim the driver could forget is not
// prepared (the kubelet asks again). The node's CNI IPAM plugins
// (pod_network.ipam) give the claims' addresses first, outside the
// driver's lock: a plugin's round trips to its store must not hold back
// the pod network's sandbox starts.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	delegated, failed := d.addDelegated(ctx, claims)
	d.mu.Lock()
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	// The call's claims are held and recorded in copies, which replace the
	// driver's once the checkpoint has them.
	held, prepared := maps.Clone(d.holders), maps.Clone(d.prepared)
	var added []*resourceapi.ResourceClaim
	for _, claim := range claims {
		r := PrepareClaim(claim, d.Name, d.NodeName, d.kind, d.inv)
		if err := failed[claim.UID]; err != nil && r.Err == nil {
			r = kubeletplugin.PrepareResult{Err: err}
		}
		if r.Err == nil {
			own := heldBy(claim, d.Name, r.Devices)
			if err := held.conflict(claim.UID, own, d.inv.PFs); err != nil {
				r = kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)}
			} else {
				held.hold(claim.UID, own)
				if d.DeviceMetadata {
					r.Devices = ClaimMetadata(claim, d.Name, r.Devices, d.inv, d.shown(), d.podInterfaces(claim))
				}
				since, addrs := metav1.NewTime(time.Now().Truncate(time.Second)), delegated[claim.UID]
				if p, again := d.prepared[claim.UID]; again {
					since, addrs = p.Since, p.Addresses
				}
				prepared[claim.UID] = PreparedClaim{Claim: claim, Devices: r.Devices, Since: since, Addresses: addrs}
				added = append(added, claim)
			}
		}
		out[claim.UID] = r
	}
	crashPoint(d.dataDir, PrepareBeforeCheckpoint)
	if err := d.saveCheckpoint(prepared); err != nil {
		for _, claim := range added {
			out[claim.UID] = kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)}
		}
		added = nil
	} else {
		d.holders, d.prepared = held, prepared
	}
	for _, claim := range added {
		d.remember(claim, out[claim.UID].Devices, prepared[claim.UID].Since)
	}
	d.mu.Unlock()
	for _, claim := range claims {
		err := out[claim.UID].Err
		if err != nil && len(delegated[claim.UID]) > 0 {
			err = errors.Join(err, delDelegated(ctx, d.ipam(), claim, delegated[claim.UID]))
		}
		if err != nil {
			d.Log.Warnf("prepare: %v", err)
		}
	}
	crashPoint(d.dataDir, PrepareAfterCheckpoint)
	return out, nil
}

// ipam is the node's CNI IPAM plugins, as configured now.
func (d *Driver) ipam() cniipam.Delegate {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ipamLocked()
}

func (d *Driver) ipamLocked() cniipam.Delegate {
	if !d.podNet.Enabled {
		return cniipam.Delegate{}
	}
	return cniipam.Delegate{BinDirs: d.podNet.CNIBinDirs, Plugins: d.podNet.Plugins()}
}

// addDelegated gets the addresses claims need from the node's CNI IPAM
// plugins (delegatedAddresses), by claim; a claim prepared already has
// its own and gets none. A claim whose plugin failed is in failed, with
// why.
func (d *Driver) addDelegated(ctx context.Context, claims []*resourceapi.ResourceClaim) (got map[types.UID][]DelegatedAddress, failed map[types.UID]error) {
	d.mu.Lock()
	plugins := d.ipamLocked()
	want := map[types.UID][]DelegatedAddress{}
	got, failed = map[types.UID][]DelegatedAddress{}, map[types.UID]error{}
	for _, claim := range claims {
		if _, again := d.prepared[claim.UID]; again {
			continue
		}
		if want[claim.UID], failed[claim.UID] = delegatedAddresses(claim, d.Name, d.inv, d.node, plugins); failed[claim.UID] != nil {
			delete(want, claim.UID)
		}
	}
	d.mu.Unlock()
	for _, claim := range claims {
		if len(want[claim.UID]) > 0 {
			got[claim.UID], failed[claim.UID] = addDelegated(ctx, plugins, claim, want[claim.UID])
		}
	}
	return got, failed
}

// remember keeps a prepared claim's status current and its pods in the
// holder metrics. d.mu is held.
func (d *Driver) remember(claim *resourceapi.ResourceClaim, devices []kubeletplugin.Device, since metav1.Time) {
	d.statuses.track(claim, since)
	d.Metrics.SetClaimHolders(string(claim.UID), ClaimHolders(claim, devices, d.inv))
}

// UnprepareResourceClaims frees the claims' devices and clears their
// status entries, the claims a previous process prepared included; a claim
// not prepared here is not an error. A claim's CNI IPAM addresses are freed
// first, outside the lock; a plugin that fails keeps the claim prepared,
// and a checkpoint that cannot be written fails the claims: the kubelet
// asks again.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	d.mu.Lock()
	plugins, prepared := d.ipamLocked(), maps.Clone(d.prepared)
	d.mu.Unlock()
	for _, c := range claims {
		if p, ok := prepared[c.UID]; ok && len(p.Addresses) > 0 {
			out[c.UID] = delDelegated(ctx, plugins, p.Claim, p.Addresses)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range claims {
		if out[c.UID] != nil {
			d.Log.Warnf("unprepare: %v", out[c.UID])
			continue
		}
		d.holders.release(c.UID)
		d.statuses.untrack(c.UID)
		d.Metrics.SetClaimHolders(string(c.UID), nil)
		delete(d.prepared, c.UID)
		out[c.UID] = nil
	}
	crashPoint(d.dataDir, UnprepareBeforeCheckpoint)
	if err := d.saveCheckpoint(d.prepared); err != nil {
		d.Log.Warnf("unprepare: %v", err)
		for _, c := range claims {
			out[c.UID] = err
		}
	}
	crashPoint(d.dataDir, UnprepareAfterCheckpoint)
	return out, nil
}

// saveCheckpoint writes prepared as the checkpoint file (nothing before
// Run has set dataDir).
func (d *Driver) saveCheckpoint(prepared map[types.UID]PreparedClaim) error {
	if d.dataDir == "" {
		return nil
	}
	return saveCheckpoint(filepath.Join(d.dataDir, CheckpointFile), d.Name, prepared)
}

// restore takes over the claims the checkpoint in dataDir holds, before the
// kubelet can call: their devices stay held, their statuses current, their
// pods in the metrics. d.mu is held.
func (d *Driver) restore(dataDir string) {
	d.dataDir = dataDir
	prepared, err := loadCheckpoint(filepath.Join(dataDir, CheckpointFile), d.Name)
	if err != nil {
		d.Log.Error(err)
	}
	d.prepared = prepared
	for uid, p := range prepared {
		d.holders.hold(uid, heldBy(p.Claim, d.Name, p.Devices))
		d.remember(p.Claim, p.Devices, p.Since)
	}
	if len(prepared) > 0 {
		d.Log.Infof("took over %d prepared claims from %s", len(prepared), filepath.Join(dataDir, CheckpointFile))
	}
}

// nodeAddressesEvery is how often the driver reads its Node's addresses
// again: a Get, which the agent's role allows, rather than a watch of
// Nodes, which it does not need otherwise.
const nodeAddressesEvery = 30 * time.Second

// nodeAddressesMissable is how many reads in a row may fail before the
// last addresses read are forgotten: one API server hiccup should not stop
// moves, but after 90 s the Node may hold an address they lack.
const nodeAddressesMissable = 2

// followNodeIPs keeps the Node's addresses current until ctx ends, read
// every nodeAddressesEvery. No netdev is moved into a pod
// (NodeFacts.NodeIPsKnown) until a read succeeds, nor once more than
// nodeAddressesMissable reads in a row have failed.
func (d *Driver) followNodeIPs(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(nodeAddressesEvery):
		}
		d.readNodeIPsOrWarn(ctx)
	}
}

func (d *Driver) readNodeIPsOrWarn(ctx context.Context) {
	if err := d.readNodeIPs(ctx); err != nil && ctx.Err() == nil {
		d.Log.Warnf("reading node %s's addresses: %v; after %d failed reads in a row netdevs are not moved into pods until a read succeeds", d.NodeName, err, nodeAddressesMissable+1)
	}
}

// readNodeIPs learns the Node's addresses: a netdev holding one is the
// node's. Every address the Node lists that is an IP counts, whatever its
// type (InternalIP, ExternalIP, a Hostname the kubelet was given as an
// IP); DNS names do not.
func (d *Driver) readNodeIPs(ctx context.Context) error {
	node, err := d.Client.CoreV1().Nodes().Get(ctx, d.NodeName, metav1.GetOptions{})
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil {
		if d.nodeIPsMissed++; d.nodeIPsMissed > nodeAddressesMissable {
			d.nodeIPs, d.nodeIPsKnown = nil, false
		}
		return err
	}
	var ips []netip.Addr
	for _, a := range node.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			ips = append(ips, ip)
		}
	}
	d.nodeIPs, d.nodeIPsKnown, d.nodeIPsMissed = ips, true, 0
	return nil
}

// HandleError logs background errors (publishing the slice); a fatal one
// stops the driver, so the DaemonSet restarts it.
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	if errors.Is(err, kubeletplugin.ErrRecoverable) {
		d.Log.Warnf("%s: %v", msg, err)
		return
	}
	d.Log.Errorf("%s: %v", msg, err)
	d.mu.Lock()
	fail := d.fail
	d.mu.Unlock()
	if fail != nil {
		fail(fmt.Errorf("%s: %w", msg, err))
	}
}

// WatchHealthStatus streams the devices' health to the kubelet's
// DRAResourceHealth client, which shows it in the status of the pods that
// hold them (allocatedResourcesStatus): the same problems the slice's
// taints carry, at once when one changes and every healthResend otherwise.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	resend := time.NewTicker(healthResend)
	defer resend.Stop()
	for {
		d.mu.Lock()
		problems, degraded, changed := d.problems, d.degraded, d.healthChanged
		d.mu.Unlock()
		if problems != nil { // nil until the first publish
			select {
			case reports <- HealthReport(d.NodeName, problems, degraded, time.Now()):
			case <-ctx.Done():
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-resend.C:
		}
	}
}

// reportExtendedResource logs whether the expected extended resource is
// served. DeviceClasses may be created after the driver starts (Helm
// applies them last), so a class not found yet is looked for again for a
// minute.
func (d *Driver) reportExtendedResource(ctx context.Context) {
	if d.ExtendedResource == "" {
		return
	}
	var msg string
	for wait := time.Second; wait <= 32*time.Second; wait *= 2 {
		classes, err := d.Client.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
		if err != nil {
			msg = fmt.Sprintf("extended resource %s: listing DeviceClasses: %v", d.ExtendedResource, err)
		} else {
			served, found, verdict := ExtendedResourceVerdict(classes.Items, d.Name, d.ExtendedResource)
			switch {
			case served:
				d.Log.Info(verdict)
				return
			case found: // the server dropped the field: waiting changes nothing
				d.Log.Warn(verdict)
				return
			}
			msg = verdict
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
	d.Log.Warn(msg)
}

// deviceStatuses is DeviceStatuses from the driver's current view.
func (d *Driver) deviceStatuses(claim *resourceapi.ResourceClaim, since metav1.Time) []resourceapi.AllocatedDeviceStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	return DeviceStatuses(claim, d.Name, d.inv, d.health, d.node, d.ncclCfg, since, d.podInterfaces(claim))
}

// podInterfaces are the interfaces the claim's pod holds, by HCA (none
// without pod networking, or for a claim reserved for several pods, whose
// interfaces differ).
func (d *Driver) podInterfaces(claim *resourceapi.ResourceClaim) map[string]attach.Observed {
	var pods []types.UID
	for _, r := range claim.Status.ReservedFor {
		if r.Resource == "pods" && r.APIGroup == "" {
			pods = append(pods, r.UID)
		}
	}
	if len(pods) != 1 || d.PodNetwork == nil {
		return nil
	}
	return d.PodNetwork.Interfaces(pods[0])
}

// writeStatus applies statuses as the driver's entries of the claim's
// status.devices (server-side apply, the driver's name as field manager).
// A clear first looks at the claim: once the claim controller has
// deallocated it (a standalone claim whose pod is gone), or it was deleted
// and made again, there is nothing of ours to clear, and the API would
// refuse the write for a claim no longer allocated here, again and again.
func (d *Driver) writeStatus(ctx context.Context, claim *resourceapi.ResourceClaim, statuses []resourceapi.AllocatedDeviceStatus) error {
	claims := d.Client.ResourceV1().ResourceClaims(claim.Namespace)
	if statuses == nil {
		current, err := claims.Get(ctx, claim.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if !hasEntriesOf(current, claim.UID, d.Name) {
			return nil
		}
	}
	_, err := claims.ApplyStatus(ctx, statusApply(claim.Namespace, claim.Name, statuses),
		metav1.ApplyOptions{FieldManager: d.Name, Force: true})
	d.Metrics.ClaimStatusWritten(err)
	return err
}

// hasEntriesOf tells whether current, the API's copy of a claim, is still
// the claim prepared as uid and carries status.devices entries of driver.
func hasEntriesOf(current *resourceapi.ResourceClaim, uid types.UID, driver string) bool {
	if current.UID != uid {
		return false
	}
	for _, entry := range current.Status.Devices {
		if entry.Driver == driver {
			return true
		}
	}
	return false
}

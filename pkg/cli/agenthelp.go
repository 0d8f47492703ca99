package cli

// One-line help of the agent binary's commands, said once: rdma-cdi lists
// the same commands as stand-ins that run rdma-cdi-agent, and cannot
// import the agent's packages without their dependencies.
const (
	WatchShort        = "Keep the CDI spec current: rewrite it when devices, GIDs, addresses or libraries change"
	DevicePluginShort = "Serve RDMA HCAs to the kubelet as extended resources, and keep the CDI spec current"
	TopShort          = "Show each HCA's throughput and the pods or containers holding it, refreshed, from the node agent's metrics"
)

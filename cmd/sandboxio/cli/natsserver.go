package cli

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/internal/embednats"
)

// natsServerCmd runs one embedded nats-server node with JetStream, alone or
// as a member of a cluster, for deployments without a nats-server binary
// (deploy/compose.yaml, deploy/k8s/nats.yaml).
func natsServerCmd(g *globals) *cobra.Command {
	var listen, storeDir, serverName, clusterName, clusterListen, clusterAdvertise, routes, monitor, configFile string
	var maxPayload int32
	cmd := &cobra.Command{
		Use:   "nats-server",
		Short: "Run one nats-server node with JetStream (alone, or in a cluster with --routes)",
		Long: `Run one embedded nats-server node with JetStream, for deployments without a
nats-server binary. Without --routes it is a single server. With --routes it
joins a JetStream cluster: give every node the same --cluster-name and the
same --routes (the cluster URLs of all nodes, its own included), a unique and
stable --server-name, and a --store-dir that survives restarts.

The --nats flag does not apply to this command.`,
		Example: `  sandboxio nats-server --store-dir /data --server-name n1 \
    --cluster-name sandboxio --cluster-listen 0.0.0.0:6222 \
    --routes nats-route://n1:6222,nats-route://n2:6222,nats-route://n3:6222 \
    --monitor 0.0.0.0:8222`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := embednats.Config{StoreDir: storeDir, ServerName: serverName, MaxPayload: maxPayload,
				Logger: g.logger().With("service", "nats-server"), LogNotices: true, ConfigFile: configFile}
			var err error
			if cfg.Host, cfg.Port, err = hostPort("--listen", listen); err != nil {
				return err
			}
			if monitor != "" {
				if cfg.MonitorHost, cfg.MonitorPort, err = hostPort("--monitor", monitor); err != nil {
					return err
				}
			}
			rs, err := embednats.ParseRoutes(routes)
			if err != nil {
				return err
			}
			if len(rs) > 0 {
				if clusterName == "" {
					return fmt.Errorf("--routes needs --cluster-name")
				}
				cfg.ClusterName = clusterName
				if cfg.ClusterHost, cfg.ClusterPort, err = hostPort("--cluster-listen", clusterListen); err != nil {
					return err
				}
				cfg.ClusterAdvertise = clusterAdvertise
				for _, u := range rs {
					cfg.Routes = append(cfg.Routes, u.String())
				}
			} else if cmd.Flags().Changed("cluster-name") || cmd.Flags().Changed("cluster-listen") {
				return fmt.Errorf("a JetStream cluster needs --routes (the cluster URLs of every node)")
			}
			return embednats.Run(cmd.Context(), cfg)
		},
	}
	host, _ := os.Hostname()
	f := cmd.Flags()
	f.StringVar(&listen, "listen", envOr("SBX_NATS_LISTEN", "0.0.0.0:4222"), "client listen address host:port")
	f.StringVar(&storeDir, "store-dir", envOr("SBX_NATS_STORE_DIR", "sandboxio-nats"), "JetStream store directory (keep it across restarts)")
	f.StringVar(&serverName, "server-name", envOr("SBX_NATS_SERVER_NAME", host), "unique, stable node name")
	f.StringVar(&clusterName, "cluster-name", os.Getenv("SBX_NATS_CLUSTER_NAME"), "cluster name, the same on every node (needed with --routes)")
	f.StringVar(&clusterListen, "cluster-listen", envOr("SBX_NATS_CLUSTER_LISTEN", "0.0.0.0:6222"), "cluster (route) listen address host:port")
	f.StringVar(&clusterAdvertise, "cluster-advertise", "", "host:port peers should use for this node's cluster port (default: discovered)")
	f.StringVar(&routes, "routes", os.Getenv("SBX_NATS_ROUTES"), "comma-separated cluster URLs of every node, e.g. nats-route://n1:6222,nats-route://n2:6222")
	f.StringVar(&monitor, "monitor", os.Getenv("SBX_NATS_MONITOR"), "serve HTTP monitoring (/healthz, /varz, /jsz) on host:port, e.g. 0.0.0.0:8222")
	f.Int32Var(&maxPayload, "max-payload", 8<<20, "largest message in bytes")
	f.StringVar(&configFile, "config", os.Getenv("SBX_NATS_CONFIG"), "nats-server configuration file to start from, e.g. the nats-server.conf of `sandboxio auth init` (authentication on); the flags above override its listen, store and cluster settings")
	return cmd
}

// hostPort splits host:port; an empty host means all interfaces, port -1 a
// free port.
func hostPort(flag, s string) (string, int, error) {
	h, p, err := net.SplitHostPort(strings.TrimSpace(s))
	if err != nil {
		return "", 0, fmt.Errorf("%s %q: want host:port: %w", flag, s, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("%s %q: bad port", flag, s)
	}
	if h == "" {
		h = "0.0.0.0"
	}
	return h, port, nil
}

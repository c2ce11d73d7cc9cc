package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/internal/telemetry"
	"github.com/sandboxio/sandboxio/pkg/bus"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/pkg/worker"
	"github.com/sandboxio/sandboxio/services/router"
)

func roleCmds(g *globals) []*cobra.Command {
	var routingFile, routerSigning, routerMetrics string
	var gatewayURL, gatewayDomain, reservedPorts, portLinkKeyFile string
	limits := busLimitFlags{}
	var replicas int
	routerCmd := &cobra.Command{
		Use:   "router",
		Short: "Run the router (the client API micro service) against --nats",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			routing, err := router.LoadRouting(routingFile)
			if err != nil {
				return err
			}
			nc, err := g.connectService(cmd.Context(), "sandboxio-router")
			if err != nil {
				return err
			}
			defer nc.Close()
			_, seed, err := (&workerKeys{signingFile: routerSigning}).load()
			if err != nil {
				return err
			}
			// A router given --replicas owns the bus's configuration (it
			// updates streams and buckets to it); others only create what is
			// missing (pkg/bus: Config.Owner).
			owner := cmd.Flags().Changed("replicas")
			busCfg := bus.Config{Replicas: replicas, Owner: owner, Logger: g.logger()}
			if err := limits.apply(&busCfg); err != nil {
				return err
			}
			reserved, err := router.ParsePorts(reservedPorts)
			if err != nil {
				return usageErr(err)
			}
			linkKey, err := loadPortLinkKey(portLinkKeyFile)
			if err != nil {
				return err
			}
			if linkKey == nil && gatewayDomain != "" {
				g.logger().Warn("no --port-link-key-file: the router makes no browser links for private ports (tokens only)")
			}
			svc, err := router.New(router.Config{Routing: routing, Bus: busCfg, Logger: g.logger(),
				SigningSeed: seed, GatewayURL: gatewayURL, GatewayDomain: gatewayDomain, ReservedPorts: reserved,
				PortLinkKey: linkKey}, nc)
			if err != nil {
				return err
			}
			if routerMetrics != "" {
				ctx, cancel := context.WithCancel(cmd.Context())
				defer cancel()
				served := make(chan error, 1)
				go func() { served <- telemetry.ServeMetrics(ctx, routerMetrics, svc.MetricsHandler(), g.logger()) }()
				defer func() { cancel(); <-served }()
				return svc.Run(ctx)
			}
			return svc.Run(cmd.Context())
		},
	}
	routerCmd.Flags().StringVar(&routerMetrics, "metrics", os.Getenv("SBX_ROUTER_METRICS_ADDR"),
		"serve the router's outcome metrics (calls, errors by SBX code, latency, by op) at /metrics on this address, e.g. :9466 (env SBX_ROUTER_METRICS_ADDR)")
	routerCmd.Flags().StringVar(&routingFile, "routing", os.Getenv("SBX_ROUTING"), "routing YAML file (default: the built-in classes)")
	routerCmd.Flags().StringVar(&gatewayURL, "gateway-url", os.Getenv("SBX_GATEWAY_URL"),
		"base URL of the ports gateway, e.g. http://127.0.0.1:8480: published ports' path_url is URL/sandboxes/<sandbox>/ports/<port>/ (env SBX_GATEWAY_URL)")
	routerCmd.Flags().StringVar(&gatewayDomain, "gateway-domain", os.Getenv("SBX_GATEWAY_DOMAIN"),
		"the gateway's host routing domain: published ports' url is <scheme>://<port>-<sandbox>.DOMAIN[:port]/ with the gateway URL's scheme and port (env SBX_GATEWAY_DOMAIN)")
	routerCmd.Flags().StringVar(&portLinkKeyFile, "port-link-key-file", os.Getenv("SBX_PORT_LINK_KEY_FILE"),
		"file with the port link key (32 bytes as hex; sandboxio auth init writes keys/port-link.key) that signs private ports' browser links; the gateways hold the same one. Without it: no links, tokens only (env SBX_PORT_LINK_KEY_FILE)")
	routerCmd.Flags().StringVar(&reservedPorts, "reserved-ports", os.Getenv("SBX_RESERVED_PORTS"),
		"comma-separated ports no sandbox may publish, e.g. 22,2375 (env SBX_RESERVED_PORTS)")
	// The bus's byte limits, applied by the bus's owner (--replicas
	// given). Each worker gives its live sandboxes together 7/8 of
	// SBX_OUT's, each at most that ÷ live sandboxes.
	limits.register(routerCmd.Flags())
	routerCmd.Flags().IntVar(&replicas, "replicas", 1, "stream and bucket replicas (3 on a cluster); given, this router owns the bus's configuration and updates it")
	routerCmd.Flags().StringVar(&routerSigning, "signing-key", os.Getenv("SBX_SIGNING_KEY_FILE"),
		"file with the router's nkey seed (SU…) that signs its commands, e.g. keys/signing-router.nk (env SBX_SIGNING_KEY_FILE)")

	cmds := []*cobra.Command{routerCmd}
	for _, name := range []string{"fake", "docker", "e2b", "modal"} {
		var capacity, wreplicas int
		var workerID, metricsAddr, commandersFile, wreserved string
		var keys workerKeys
		c := &cobra.Command{
			Use:   name + "-worker",
			Short: "Run a worker of the " + name + " backend against --nats",
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				if workerID != "" && !events.ValidID(workerID) {
					return fmt.Errorf("--worker-id %q: use [a-z0-9_-]", workerID)
				}
				reserved, err := router.ParsePorts(wreserved)
				if err != nil {
					return usageErr(err)
				}
				sealSeed, signingSeed, err := keys.load()
				if err != nil {
					return err
				}
				var commanders []string
				var scopes map[string][]string
				if commandersFile != "" {
					if commanders, err = readSigners(commandersFile, "--trusted-commanders"); err != nil {
						return err
					}
					// command-scopes.txt beside it (auth init writes both)
					// limits the reaper's key to kills.
					if scopes, err = auth.ReadCommandScopes(filepath.Join(filepath.Dir(commandersFile), "command-scopes.txt")); err != nil {
						return err
					}
				}
				log := g.logger()
				backend, closeFn, generatedID, err := openBackendAs(cmd.Context(), name, workerID, log)
				if err != nil {
					return err
				}
				if closeFn != nil {
					defer closeFn()
				}
				if workerID == "" {
					workerID = generatedID
				}
				nc, err := g.connectService(cmd.Context(), "sandboxio-"+name+"-worker")
				if err != nil {
					return err
				}
				defer nc.Close()
				wcfg, err := workerConfig(worker.Config{WorkerID: workerID, Capacity: capacity, Bus: bus.Config{Replicas: wreplicas}, Logger: log,
					SealSeed: sealSeed, SigningSeed: signingSeed, TrustedCommandSigners: commanders, CommandScopes: scopes,
					ReservedPorts: reserved})
				if err != nil {
					return err
				}
				ctx, cancel := context.WithCancel(cmd.Context())
				defer cancel()
				if metricsAddr != "" {
					prov, err := telemetry.Setup(ctx, telemetry.Config{ServiceName: "sandboxio-" + name + "-worker", ServiceInstanceID: workerID, Logger: log})
					if err != nil {
						return err
					}
					defer func() { _ = prov.Shutdown(context.Background()) }()
					wcfg.Meter = prov.Meter.Meter("sandboxio/worker")
					served := make(chan error, 1)
					go func() { served <- telemetry.ServeMetrics(ctx, metricsAddr, prov.MetricsHandler(), log) }()
					defer func() { cancel(); <-served }()
				}
				w, err := worker.New(wcfg, nc, backend)
				if err != nil {
					return err
				}
				return w.Run(ctx)
			},
		}
		keys.register(c)
		c.Flags().StringVar(&commandersFile, "trusted-commanders", os.Getenv("SBX_TRUSTED_COMMANDERS_FILE"),
			"file of the public keys (U…) of the router and the reaper, one a line, e.g. keys/commanders.txt; only commands they sign run (env SBX_TRUSTED_COMMANDERS_FILE)")
		c.Flags().StringVar(&wreserved, "reserved-ports", os.Getenv("SBX_RESERVED_PORTS"),
			"comma-separated ports of its sandboxes no connection reaches, whatever the registry says: the routers' --reserved-ports (env SBX_RESERVED_PORTS)")
		c.Flags().IntVar(&capacity, "capacity", 256, "concurrent operations")
		c.Flags().IntVar(&wreplicas, "replicas", 1, "replicas of the streams and buckets this worker creates when they are missing (3 on a cluster); never changes existing ones")
		c.Flags().StringVar(&workerID, "worker-id", os.Getenv("SBX_WORKER_ID"), "stable worker id (keep it across restarts to re-adopt sandboxes)")
		c.Flags().StringVar(&metricsAddr, "metrics", os.Getenv("SBX_WORKER_METRICS_ADDR"), "serve Prometheus metrics (records pending, retried, lost) on this address, e.g. :9465")
		cmds = append(cmds, c)
	}
	return cmds
}

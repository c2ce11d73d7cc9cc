package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
	"github.com/spf13/cobra"

	"github.com/sandboxio/sandboxio/internal/auth"
	"github.com/sandboxio/sandboxio/pkg/events"
	"github.com/sandboxio/sandboxio/services/auditor"
	"github.com/sandboxio/sandboxio/services/reaper"
)

func init() {
	startOpsServices = func(ctx context.Context, a *allInOne, log *slog.Logger) error {
		anc, err := a.connAs("sandboxio-auditor", auth.RoleAuditor)
		if err != nil {
			return err
		}
		var signers []string
		if a.layout != nil {
			if signers, err = readSigners(a.layout.SignersFile()); err != nil {
				return err
			}
		}
		// The checkpoint key stays across restarts: the layout's with auth,
		// else one kept in the data dir (auditor-keys.txt beside the log:
		// audit verify finds it).
		seedFile := filepath.Join(a.dataDir, "auditor.nk")
		if a.layout != nil {
			seedFile = a.layout.SigningKeyFile(auth.AuditorSigner)
		}
		audSeed, err := keptSeed(seedFile, filepath.Join(a.dataDir, auditorKeysFile))
		if err != nil {
			return err
		}
		aud, err := auditor.New(auditor.Config{LogPath: filepath.Join(a.dataDir, "audit.jsonl"), Logger: log,
			TrustedSigners: signers, SigningSeed: audSeed}, anc)
		if err != nil {
			return err
		}
		a.metrics = append(a.metrics, aud.MetricsHandler()) // served with the router's on SBX_METRICS_ADDR
		a.goRun("auditor", func() error { return aud.Run(ctx) })
		rnc, err := a.connAs("sandboxio-reaper", auth.RoleReaper)
		if err != nil {
			return err
		}
		var seed []byte
		if a.layout != nil {
			// The reaper signs with the key the auditor's trusted list holds.
			if seed, err = os.ReadFile(a.layout.SigningKeyFile(auth.ReaperSigner)); err != nil {
				return fmt.Errorf("reaper signing key: %w", err)
			}
		}
		rp, err := reaper.New(reaper.Config{Logger: log, SigningSeed: seed}, rnc)
		if err != nil {
			return err
		}
		a.goRun("reaper", func() error { return rp.Run(ctx) })
		return nil
	}
}

func opsCmds(g *globals) []*cobra.Command {
	var logPath, metricsAddr, durable, signersFile, auditorSigning string
	var checkpointInterval time.Duration
	auditorCmd := &cobra.Command{
		Use:   "auditor",
		Short: "Run the auditor: SBX_OPS → hash-chained audit log, OpenTelemetry spans, Prometheus metrics",
		Args:  cobra.NoArgs,
		RunE: g.withService("sandboxio-auditor", func(cmd *cobra.Command, nc *nats.Conn, _ []string) error {
			var signers []string
			if signersFile != "" {
				var err error
				if signers, err = readSigners(signersFile); err != nil {
					return err
				}
			}
			_, seed, err := (&workerKeys{signingFile: auditorSigning}).load()
			if err != nil {
				return err
			}
			svc, err := auditor.New(auditor.Config{LogPath: logPath, MetricsAddr: metricsAddr, Durable: durable, Logger: g.logger(),
				TrustedSigners: signers, SigningSeed: seed, CheckpointInterval: checkpointInterval}, nc)
			if err != nil {
				return err
			}
			return svc.Run(cmd.Context())
		}),
	}
	auditorCmd.Flags().StringVar(&logPath, "log", envOr("SBX_AUDIT_LOG", "sandboxio-audit.jsonl"), "audit log file (one writer per file)")
	auditorCmd.Flags().StringVar(&metricsAddr, "metrics", os.Getenv("SBX_METRICS_ADDR"), "serve Prometheus metrics on this address, e.g. :9464")
	auditorCmd.Flags().StringVar(&durable, "durable", "auditor", "durable consumer name (a second name keeps an independent full copy)")
	auditorCmd.Flags().StringVar(&signersFile, "trusted-signers", os.Getenv("SBX_TRUSTED_SIGNERS_FILE"),
		"file of the workers' public signing keys (U…), one a line; records signed by others are flagged (env SBX_TRUSTED_SIGNERS_FILE)")

	auditorCmd.Flags().StringVar(&auditorSigning, "signing-key", os.Getenv("SBX_AUDITOR_SIGNING_KEY_FILE"),
		"file with the auditor's nkey seed (SU…) that signs the log's checkpoints, e.g. keys/signing-auditor.nk (env SBX_AUDITOR_SIGNING_KEY_FILE); without it a new key each start, and the whole log is checked at start")
	auditorCmd.Flags().DurationVar(&checkpointInterval, "checkpoint-interval", auditor.DefaultCheckpointInterval,
		"a checkpoint seals the log at most this long after the first line since the last one")

	var reaperSigning string
	var reaperReplicas int
	reaperCmd := &cobra.Command{
		Use:   "reaper",
		Short: "Run the reaper: deadlines, lost workers, orphans (one active instance, the rest on standby)",
		Args:  cobra.NoArgs,
		RunE: g.withService("sandboxio-reaper", func(cmd *cobra.Command, nc *nats.Conn, _ []string) error {
			_, seed, err := (&workerKeys{signingFile: reaperSigning}).load()
			if err != nil {
				return err
			}
			svc, err := reaper.New(reaper.Config{Logger: g.logger(), SigningSeed: seed, Replicas: reaperReplicas}, nc)
			if err != nil {
				return err
			}
			return svc.Run(cmd.Context())
		}),
	}
	reaperCmd.Flags().IntVar(&reaperReplicas, "replicas", 0, "replicas of the reaper's sbx_reaper bucket (3 on a cluster); given, an existing bucket is updated to it; 0: use the bucket as it is, 1 when creating it")
	reaperCmd.Flags().StringVar(&reaperSigning, "signing-key", os.Getenv("SBX_SIGNING_KEY_FILE"),
		"file with the reaper's nkey seed (SU…) that signs its records, e.g. keys/signing-reaper.nk (env SBX_SIGNING_KEY_FILE)")

	var dryRun bool
	reapCmd := &cobra.Command{
		Use:   "reap",
		Short: "Run one sweep now and print what it found and did",
		Args:  cobra.NoArgs,
		RunE: g.withConn("sandboxio-reap", func(cmd *cobra.Command, nc *nats.Conn, _ []string) error {
			svc, err := reaper.New(reaper.Config{Logger: g.logger()}, nc)
			if err != nil {
				return err
			}
			rep, err := svc.Sweep(cmd.Context(), dryRun)
			if err != nil {
				return err
			}
			if err := rep.WriteText(g.stdout); err != nil {
				return err
			}
			if rep.Errors() > 0 {
				return exitError{code: 1}
			}
			return nil
		}),
	}
	reapCmd.Flags().BoolVar(&dryRun, "dry-run", false, "report only; change nothing")

	auditCmd := &cobra.Command{Use: "audit", Short: "Read the audit trail"}
	var asJSON, openTail bool
	var verifySigners, auditorKeys, checkpointFile, authDir string
	var fromBus bool
	verifyCmd := &cobra.Command{
		Use:   "verify FILE",
		Short: "Check an audit log's hash chain and record signatures; exit 1 and name every line changed, removed, reordered or not signed by a trusted worker",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer f.Close()
			verifySigners, auditorKeys := defaultKeyFiles(args[0], authDir, verifySigners, auditorKeys)
			opts, err := verifyOptions(verifySigners, auditorKeys, checkpointFile, openTail)
			if err != nil {
				return err
			}
			if fromBus {
				if opts.Checkpoint, err = g.busCheckpoint(ctxOf(cmd), f, opts.AuditorKeys); err != nil {
					return missingCheckpoint(g, args[0], err)
				}
			}
			rep, verr := auditor.VerifyWith(f, opts)
			if asJSON {
				_ = json.NewEncoder(g.stdout).Encode(rep)
			} else {
				fmt.Fprintf(g.stdout, "%d lines, last seq %d, head %s\n", rep.Lines, rep.LastSeq, rep.HeadHash)
				for _, p := range rep.Problems {
					fmt.Fprintf(g.stdout, "%s\n", problemLine(p))
				}
				if rep.TornTail {
					fmt.Fprintln(g.stdout, "the last line is incomplete (never acknowledged; the auditor cuts it off)")
				}
				if rep.OK() {
					fmt.Fprintln(g.stdout, "chain intact")
				}
				if cp := rep.LastCheckpoint; cp != nil {
					fmt.Fprintf(g.stdout, "%d checkpoints, the last of line %d (head %s); %d lines after it\n", rep.Checkpoints, cp.Seq, cp.Head, rep.OpenTail)
				}
				fmt.Fprintf(g.stdout, "%d records signed by a trusted worker, %d not\n", rep.Signed, rep.UnverifiedCount)
				for _, p := range rep.Unverified {
					fmt.Fprintf(g.stdout, "line %d: seq %d: record %s: signature %s %s\n", p.Line, p.Seq, p.ID, p.Sig, p.Signer)
				}
				if n := rep.UnverifiedCount - len(rep.Unverified); n > 0 {
					fmt.Fprintf(g.stdout, "… and %d more records not signed by a trusted worker\n", n)
				}
			}
			if verr != nil && !asJSON {
				fmt.Fprintf(g.stderr, "sandboxio: audit log %s: %v\n", args[0], verr)
			}
			if verr != nil || rep.SignatureError() != nil {
				return exitError{code: exitFailure} // named above, line by line
			}
			return nil
		},
	}
	verifyCmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	verifyCmd.Flags().StringVar(&verifySigners, "trusted-signers", os.Getenv("SBX_TRUSTED_SIGNERS_FILE"),
		"file of the workers' and the reaper's public keys (U…): a record signed by another is reported (env SBX_TRUSTED_SIGNERS_FILE)")
	verifyCmd.Flags().StringVar(&auditorKeys, "auditor-keys", os.Getenv("SBX_AUDITOR_KEYS_FILE"),
		"file of the auditor's public keys (U…) that sign the log's checkpoints; without it any checkpoint signature is taken (env SBX_AUDITOR_KEYS_FILE)")
	verifyCmd.Flags().StringVar(&checkpointFile, "checkpoint", "",
		"file with the latest checkpoint the auditor published (JSON): the log must hold it, so a cut-off tail shows")
	verifyCmd.Flags().BoolVar(&fromBus, "checkpoint-from-bus", false,
		"fetch the latest checkpoint the auditor published (KV sbx_audit, over --nats): the log must hold it, so a cut-off tail shows")
	verifyCmd.Flags().StringVar(&authDir, "dir", os.Getenv("SBX_AUTH_DIR"),
		"auth layout whose keys/signers.txt and keys/auditors.txt are the defaults of --trusted-signers and --auditor-keys (default: those of sandboxio dev beside FILE)")
	verifyCmd.Flags().BoolVar(&openTail, "open-tail", false, "accept lines after the last checkpoint (a log the auditor is still writing)")
	var follow, tailJSON bool
	var last int
	var sandbox string
	tailCmd := &cobra.Command{
		Use:   "tail",
		Short: "Print operation records from SBX_OPS",
		Args:  cobra.NoArgs,
		RunE: g.withConn("sandboxio-audit-tail", func(cmd *cobra.Command, nc *nats.Conn, _ []string) error {
			return auditor.Tail(cmd.Context(), nc, g.stdout, auditor.TailOptions{Follow: follow, Last: last, SandboxID: sandbox, JSON: tailJSON})
		}),
	}
	tailCmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new records")
	tailCmd.Flags().IntVarP(&last, "last", "n", 0, "start with the last N records (0: all)")
	tailCmd.Flags().StringVar(&sandbox, "sandbox", "", "only this sandbox")
	tailCmd.Flags().BoolVar(&tailJSON, "json", false, "print records as JSON")
	auditCmd.AddCommand(verifyCmd, tailCmd)
	return []*cobra.Command{auditorCmd, reaperCmd, reapCmd, auditCmd}
}

// verifyOptions reads audit verify's key files and checkpoint.
func verifyOptions(signersFile, auditorFile, checkpointFile string, openTail bool) (auditor.VerifyOptions, error) {
	o := auditor.VerifyOptions{AllowOpenTail: openTail}
	var err error
	if signersFile != "" {
		if o.TrustedSigners, err = readSigners(signersFile); err != nil {
			return o, err
		}
	}
	if auditorFile != "" {
		if o.AuditorKeys, err = readSigners(auditorFile, "--auditor-keys"); err != nil {
			return o, err
		}
	}
	if checkpointFile != "" {
		b, err := os.ReadFile(checkpointFile)
		if err != nil {
			return o, fmt.Errorf("--checkpoint: %w", err)
		}
		o.Checkpoint = new(auditor.Checkpoint)
		if err := json.Unmarshal(b, o.Checkpoint); err != nil {
			return o, fmt.Errorf("--checkpoint %s: %w", checkpointFile, err)
		}
	}
	return o, nil
}

// problemLine renders one problem of a verify report for a person.
func problemLine(p auditor.Problem) string {
	at := fmt.Sprintf("line %d", p.Line)
	if p.Seq > 0 {
		at += fmt.Sprintf(" (seq %d)", p.Seq)
	}
	return fmt.Sprintf("%s: %s: %s", at, p.Kind, p.Message)
}

// auditorKeysFile is where `sandboxio dev` keeps its auditor's public
// checkpoint key, beside its audit log.
const auditorKeysFile = "auditor-keys.txt"

// keptSeed reads the nkey seed in seedFile, creating it (mode 0600) when
// missing, and writes its public key into pubFile.
func keptSeed(seedFile, pubFile string) ([]byte, error) {
	if _, err := os.Stat(seedFile); errors.Is(err, fs.ErrNotExist) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, err
		}
		seed, _ := kp.Seed()
		if err := os.WriteFile(seedFile, append(seed, '\n'), 0o600); err != nil {
			return nil, err
		}
	}
	_, seed, err := (&workerKeys{signingFile: seedFile}).load()
	if err != nil {
		return nil, err
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return nil, err
	}
	pub, _ := kp.PublicKey()
	if err := os.WriteFile(pubFile, []byte(pub+"\n"), 0o644); err != nil {
		return nil, err
	}
	return seed, nil
}

// defaultKeyFiles fills audit verify's key files left empty: from the auth
// layout dir, else from what `sandboxio dev` keeps beside the log (its
// auditor-keys.txt, and auth/keys/ with --auth).
func defaultKeyFiles(logFile, authDir, signers, auditors string) (string, string) {
	exists := func(p string) bool { _, err := os.Stat(p); return err == nil }
	if authDir == "" && exists(filepath.Join(filepath.Dir(logFile), "auth", "keys")) {
		authDir = filepath.Join(filepath.Dir(logFile), "auth")
	}
	if signers == "" && authDir != "" && exists(filepath.Join(authDir, "keys", "signers.txt")) {
		signers = filepath.Join(authDir, "keys", "signers.txt")
	}
	var candidates []string
	if authDir != "" {
		candidates = append(candidates, filepath.Join(authDir, "keys", "auditors.txt"))
	}
	for _, p := range append(candidates, filepath.Join(filepath.Dir(logFile), auditorKeysFile)) {
		if auditors == "" && exists(p) {
			auditors = p
		}
	}
	return signers, auditors
}

// busCheckpoint fetches the latest checkpoint the auditor published for
// the log in f (named by the log's own checkpoints; the bucket's only log
// when it has none) and rewinds f.
func (g *globals) busCheckpoint(ctx context.Context, f *os.File, keys []string) (*auditor.Checkpoint, error) {
	rep, _ := auditor.VerifyWith(f, auditor.VerifyOptions{AllowOpenTail: true})
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	var logID string
	if rep.LastCheckpoint != nil {
		logID = rep.LastCheckpoint.Log
	}
	nc, err := g.connect("sandboxio-audit-verify")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cp, err := auditor.FetchCheckpoint(ctx, js, logID, keys)
	if errors.Is(err, auditor.ErrNoPublishedCheckpoint) {
		if logID == "" {
			logID = "(the log names none of its own)"
		}
		return nil, fmt.Errorf("KV %s holds no checkpoint for log %s: %w", events.BucketAudit, logID, err)
	}
	return cp, err
}

// missingCheckpoint: a published checkpoint that is absent (never
// published, or deleted) fails verify like a broken log (exit 1), since
// deleting it would otherwise hide a cut-off tail; any other error (the
// bus unreachable, a bad signature) is returned as it is.
func missingCheckpoint(g *globals, file string, err error) error {
	if !errors.Is(err, auditor.ErrNoPublishedCheckpoint) {
		return err
	}
	fmt.Fprintf(g.stderr, "sandboxio: audit log %s: %v: nothing to check the log's tail against, so it does not verify\n", file, err)
	return exitError{code: exitFailure}
}

package worker

import "context"

type progressKey struct{}

// WithProgress returns ctx carrying a reporter of create progress. The
// runtime sets it on Backend.Create's context.
func WithProgress(ctx context.Context, report func(msg string)) context.Context {
	return context.WithValue(ctx, progressKey{}, report)
}

// ReportProgress tells the user waiting on a create what is taking time (an
// image pull, a VM boot), if anyone listens. Backends call it at most about
// once a second; messages must hold no secret.
func ReportProgress(ctx context.Context, msg string) {
	if report, ok := ctx.Value(progressKey{}).(func(string)); ok && report != nil {
		report(msg)
	}
}

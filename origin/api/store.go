package api

import (
	"context"
	"time"

	"github.com/edgehook/edgehook/origin/store"
)

// Store is what the API needs from the store (*store.Store implements it).
type Store interface {
	Emit(ctx context.Context, in store.EmitInput) (store.EmitResult, error)
	GetEvent(ctx context.Context, id string) (*store.Event, error)
	EmitBatch(ctx context.Context, in []store.EmitInput) ([]store.EmitResult, error)
	CreateSubscriber(ctx context.Context, in store.SubscriberInput) (*store.Subscriber, error)
	ListSubscribers(ctx context.Context) ([]*store.Subscriber, error)
	GetSubscriber(ctx context.Context, id string) (*store.Subscriber, error)
	UpdateSubscriber(ctx context.Context, id string, p store.SubscriberPatch) (*store.Subscriber, error)
	DeleteSubscriber(ctx context.Context, id string) error
	PauseSubscriber(ctx context.Context, id, reason string) (*store.Subscriber, error)
	ResumeSubscriber(ctx context.Context, id string) (*store.Subscriber, error)
	RotateSecret(ctx context.Context, id string, overlap time.Duration) (*store.Subscriber, error)
	ListDeliveries(ctx context.Context, f store.DeliveryFilter) (store.DeliveryPage, error)
	GetDelivery(ctx context.Context, id string) (*store.Delivery, error)
	RetryDelivery(ctx context.Context, id string, now time.Time) (*store.Delivery, error)
	ReplayDead(ctx context.Context, subscriberID string, from, to, now time.Time) (store.Replayed, error)
	Stats(ctx context.Context, now time.Time) (store.Stats, error)
	Ping(ctx context.Context) error
	Now() time.Time
}

// Retry-After values sent when the store gave none.
const (
	defaultQueueFullRetry   = 5 * time.Second
	defaultUnavailableRetry = 2 * time.Second
)

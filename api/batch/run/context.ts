/** What a workflow run and its steps work with. */
import type { Knex } from 'knex';
import type { Logger } from 'pino';
import type { BatchConfig } from '../../../shared/config/batch.js';
import type { SpeechConfig } from '../../../shared/config/speech.js';
import type { OutboundClient } from '../net/index.js';
import type { ArtifactStore } from '../storage/index.js';
import type { SpeechEngine } from '../../../shared/stt/types.js';
import type { Reservation, UsageBudget } from '../../../shared/usage/budget.js';
import type { ArtifactKeys } from '../artifacts.js';
import type { WorkflowRepo, WorkflowRow } from '../repo.js';
import type { WorkflowParams } from '../types.js';
import type { FairShare } from '../../../shared/fairShare.js';
import type { ByteBudget } from '../../../shared/semaphore.js';

export interface RunnerHooks {
  /** Called once per chunk right before it goes to the engine (tests count these). */
  onEngineCall?(workflowId: string, chunkIndex: number): void;
  /** Called when one piece of audio gets a process engine slot (tests watch the order tenants are served in). */
  onEngineSlot?(workflowId: string): void;
  /** Called when a step's attempt starts and when it ends (tests watch the event loop during one). */
  onStep?(workflowId: string, name: string, phase: 'start' | 'end'): void;
}

export interface RunnerDeps {
  db: Knex;
  /** The process's audio budget (the job's reservation, its bill). */
  budget: UsageBudget;
  repo: WorkflowRepo;
  store: ArtifactStore;
  speech: SpeechEngine;
  outbound: OutboundClient;
  config: BatchConfig;
  /** ffmpeg and its stall watchdog: the one decode policy (shared/audio). */
  audio: SpeechConfig['audio'];
  defaultModel: string;
  logger: Logger;
  hooks?: RunnerHooks;
  /** Bounds engine calls in flight across all runs of this process, shared fairly between tenants. */
  engineSlots: FairShare;
  /** Bounds the chunk audio held in memory across all runs of this process. */
  chunkMemory: ByteBudget;
  /** Queue the webhook delivery of a finished workflow. */
  enqueueWebhook(workflowId: string): Promise<void>;
  /**
   * Queue a run of the workflow with a new pg-boss job, `afterSeconds`
   * later: its tenant is at its running bound (deferred), or this process
   * is stopping and gives the workflow back.
   */
  requeue(workflowId: string, afterSeconds: number): Promise<void>;
  /**
   * Whether the run's pg-boss job is still this worker's (heart-beating it
   * as it asks): a run paused by an outage resumes in place only then.
   * Rejects while Postgres is unreachable.
   */
  jobHeld(job: RunJob): Promise<boolean>;
}

/** The pg-boss job a run was handed (none when a run is started directly, as some tests do). */
export interface RunJob {
  id: string;
  /** Which attempt of the job this is (pg-boss fences its calls to it). */
  retryCount: number;
  /** Aborted by pg-boss when the job is no longer this worker's (heartbeat found it gone). */
  signal: AbortSignal;
}

/** One run of one workflow, as its steps see it. */
export interface RunContext {
  readonly d: RunnerDeps;
  readonly row: WorkflowRow;
  readonly params: WorkflowParams;
  /** The tenant's own key space. */
  readonly store: ArtifactStore;
  readonly keys: ArtifactKeys;
  /** The workflow's hold on its key's audio window: reserved by `probe`, billed by the pipeline, released when it ends. */
  readonly reservation: Reservation;
  /** This run's work folder (the audio, while it is needed). */
  readonly workDir: string;
  readonly signal: AbortSignal;
  readonly log: Logger;
}

package io.finalresults;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.EnumSet;
import java.util.Iterator;
import java.util.List;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.S3AFileSystem;
import org.apache.hadoop.fs.s3a.impl.PutObjectOptions;
import org.apache.hadoop.fs.s3a.impl.write.WriteObjectFlags;
import org.apache.hadoop.fs.store.audit.AuditSpan;
import software.amazon.awssdk.core.exception.SdkException;
import software.amazon.awssdk.core.sync.RequestBody;
import software.amazon.awssdk.services.s3.model.S3Exception;

/**
 * A Delta LogStore for S3 (s3a://) whose commits are atomic across processes and machines.
 *
 * Delta commits version N by creating the file _delta_log/N.json only if it does not exist yet:
 * of two writers that reach the same version, exactly one must win. S3 gives that in a single
 * request, a PUT with the header "If-None-Match: *" (answered 412 when the key already exists),
 * so this store needs no lock service. Reading and listing are those of any Hadoop file system.
 * Delta's own answer, S3DynamoDBLogStore (artifact io.delta:delta-storage-s3-dynamodb), keeps a
 * DynamoDB table for the same purpose; use it instead where it can be installed.
 *
 * What makes that single request trustworthy:
 *
 * - The request is built by the s3a file system's own request factory, so the bucket's write
 *   settings (fs.s3a.encryption.* for SSE-S3, SSE-KMS and SSE-C, the canned ACL, the storage
 *   class) apply to commit files as to every other object s3a writes: an SSE-C commit built
 *   without the key could not be read back by s3a. Client, endpoint and credentials are s3a's.
 * - Every outcome is settled before it is reported. A PUT can land and be answered as failed
 *   (a 5xx, a 409 to a retry racing the first try, an answer lost to a timeout or a reset), and
 *   a PUT answered with a timeout can land seconds later. Each commit carries a fresh id in its
 *   metadata (x-amz-meta-finalresults-commit); after any answer but 200 or a refusal (4xx), the
 *   store reads the commit file back: its own id means committed, another writer's a conflict
 *   (Delta then tries the next version), no object means the same conditional PUT (same id) is
 *   sent again, since an earlier one still in flight can then only land as this commit or be
 *   refused. A conflict is therefore reported only when another writer's commit is there, and a
 *   commit of this write can never land after it: were its own commit taken for a conflict,
 *   Delta would commit the same actions again at the next version (a blind append twice). After
 *   TRIES unsettled answers the store gives up with an IOException that says the commit may
 *   still appear, whose cause is the first unsettled answer.
 * - A store that is not atomic is refused before the first commit to it (bucket and endpoint)
 *   in this JVM: two conditional PUTs of a new marker are raced; exactly one must succeed. A
 *   store that ignores If-None-Match, or checks it and writes in two steps, lets both succeed.
 * - Overwrites (_last_checkpoint, compacted logs) go through s3a's own write path: its retries,
 *   throttling, encryption, and its errors translated to IOException.
 */
public class S3ConditionalPutLogStore extends HadoopFileSystemLogStore {

    /** User metadata that names the write which created a commit file. */
    static final String COMMIT_ID = "finalresults-commit";

    /** Conditional PUTs of one commit sent before an unsettled outcome is reported as such. */
    static final int TRIES = 6;

    /** Conditional PUTs of one marker raced by the atomicity probe. */
    private static final int RACERS = 2;

    /** Stores (bucket and endpoint) seen, in this JVM, to let exactly one of racing PUTs win. */
    private static final Set<String> ATOMIC_STORES = ConcurrentHashMap.newKeySet();

    public S3ConditionalPutLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        S3AFileSystem fs = (S3AFileSystem) path.getFileSystem(hadoopConf);
        Path qualified = fs.makeQualified(path);
        StringBuilder text = new StringBuilder();
        while (actions.hasNext()) {
            text.append(actions.next()).append('\n');
        }
        byte[] body = text.toString().getBytes(StandardCharsets.UTF_8);
        if (overwrite) {
            try (FSDataOutputStream out = fs.create(qualified, true)) {
                out.write(body);
            }
            return;
        }
        requireAtomicPutIfAbsent(fs, qualified.getParent());
        if (!putIfAbsent(fs, qualified, body)) {
            throw new FileAlreadyExistsException(path.toString());
        }
    }

    /**
     * Create {@code path} holding {@code body} unless it exists: true if the object there now is
     * this call's (a PUT that landed although its answer said otherwise included), false if
     * another writer's. Every answer but 200 and a refusal is settled by reading the object back
     * (the class comment).
     */
    static boolean putIfAbsent(S3AFileSystem fs, Path path, byte[] body) throws IOException {
        String id = UUID.randomUUID().toString();
        Exception unsettled = null;  // the first answer that left the outcome open
        List<IOException> unread = new ArrayList<>();  // read-backs that failed (the SDK's exceptions take none)
        try (AuditSpan span = fs.createSpan("delta_commit", path.toString(), null)) {
            for (int tried = 1; tried <= TRIES; tried++) {
                try {
                    put(fs, path, body, id);
                    return true;
                } catch (S3Exception e) {
                    if (refused(e)) {
                        throw new IOException("could not write " + path + ": " + e.getMessage()
                            + ". Nothing was written.", e);
                    }
                    unsettled = unsettled == null ? e : unsettled;
                } catch (SdkException e) {  // no answer: a timeout, a reset, a lost connection
                    unsettled = unsettled == null ? e : unsettled;
                }
                try {
                    String writer = writerOf(fs, path);
                    if (writer != null) {
                        return writer.equals(id);
                    }
                } catch (IOException e) {  // unread: the PUT is sent again, and may settle it
                    unread.add(e);
                }
                pause(tried);
            }
        }
        IOException open = new IOException("the commit " + path + " is unsettled after " + TRIES + " conditional "
            + "PUTs: no answer said whether it was written, and reading it back found nothing or failed. A PUT still "
            + "in flight may yet write it: run the batch again, which reports it committed if it was. First answer: "
            + unsettled.getMessage(), unsettled);
        unread.forEach(open::addSuppressed);
        throw open;
    }

    /** Whether S3 refused the PUT outright (nothing written): a 4xx but 408, 409, 412 and 429. */
    private static boolean refused(S3Exception e) {
        int status = e.statusCode();
        return status >= 400 && status < 500 && status != 408 && status != 409 && status != 412 && status != 429;
    }

    /** The commit id on the object at {@code path} ("" if it has none), null if there is none. */
    private static String writerOf(S3AFileSystem fs, Path path) throws IOException {
        try {
            return fs.getS3AInternals().getObjectMetadata(path).metadata().getOrDefault(COMMIT_ID, "");
        } catch (FileNotFoundException e) {
            return null;
        }
    }

    /**
     * Refuse a store whose put-if-absent is not atomic, once per store and JVM (decided again
     * after a restart): RACERS conditional PUTs of a new marker in {@code folder} are sent at
     * once, and exactly one must win.
     */
    private static void requireAtomicPutIfAbsent(S3AFileSystem fs, Path folder) throws IOException {
        String store = fs.getUri() + " at " + fs.getConf().getTrimmed("fs.s3a.endpoint", "AWS");
        if (ATOMIC_STORES.contains(store)) {
            return;
        }
        Path marker = new Path(folder, ".put-if-absent-probe-" + UUID.randomUUID());
        int won;
        try {
            won = race(fs, marker);
        } finally {
            fs.delete(marker, false);
        }
        if (won != 1) {
            throw new IOException("the S3 store " + store + " is not atomic on If-None-Match: " + won + " of "
                + RACERS + " conditional PUTs of " + marker + " sent at once succeeded (it ignores the header, or "
                + "checks it and writes in two steps), so two writers of one Delta version could both succeed and "
                + "one commit would be lost. No commit was written. Use a store whose conditional writes are "
                + "atomic, or Delta's S3DynamoDBLogStore (docs/s3.md).");
        }
        ATOMIC_STORES.add(store);
    }

    /** How many of RACERS conditional PUTs of {@code marker}, released together, created it. */
    private static int race(S3AFileSystem fs, Path marker) throws IOException {
        ExecutorService pool = Executors.newFixedThreadPool(RACERS);
        CountDownLatch start = new CountDownLatch(1);
        try {
            List<Future<Boolean>> racers = new ArrayList<>();
            for (int i = 0; i < RACERS; i++) {
                racers.add(pool.submit(() -> {
                    start.await();
                    return putIfAbsent(fs, marker, new byte[0]);
                }));
            }
            start.countDown();
            int won = 0;
            for (Future<Boolean> racer : racers) {
                won += racer.get() ? 1 : 0;
            }
            return won;
        } catch (ExecutionException e) {
            throw e.getCause() instanceof IOException ? (IOException) e.getCause() : new IOException(e.getCause());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted while probing " + marker);
        } finally {
            pool.shutdownNow();
        }
    }

    /** One conditional PUT of {@code body} at {@code path} tagged {@code id}, built by s3a's request factory. */
    private static void put(S3AFileSystem fs, Path path, byte[] body, String id) {
        PutObjectOptions options = new PutObjectOptions(null, Collections.singletonMap(COMMIT_ID, id),
            EnumSet.of(WriteObjectFlags.ConditionalOverwrite), null);
        fs.getS3AInternals()
            .getAmazonS3Client("Delta commit")
            .putObject(
                fs.getRequestFactory().newPutObjectRequestBuilder(fs.pathToKey(path), options, body.length, false)
                    .build(),
                RequestBody.fromBytes(body));
    }

    private static void pause(int tried) throws InterruptedIOException {
        try {
            Thread.sleep(100L << tried);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted while committing");
        }
    }

    /** An S3 object appears whole, or not at all. */
    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;
    }
}

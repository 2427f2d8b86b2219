package io.finalresults;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Collections;
import java.util.EnumSet;
import java.util.Iterator;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.hadoop.conf.Configuration;
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
 * Three things make that single request trustworthy:
 *
 * - The request is built by the s3a file system's own request factory, so the bucket's write
 *   settings (fs.s3a.encryption.* for SSE-S3, SSE-KMS and SSE-C, the canned ACL, the storage
 *   class) apply to commit files as to every other object s3a writes: an SSE-C commit built
 *   without the key could not be read back by s3a. Client, endpoint and credentials are s3a's.
 * - Each commit carries a fresh id in its metadata (x-amz-meta-finalresults-commit). The SDK
 *   retries a PUT whose answer was lost or was a 5xx (fs.s3a.attempts.maximum), and S3 answers
 *   409 to a conditional PUT racing an earlier one on the same key (which may be this writer's
 *   own first try). So a 412 is not proof of a conflict: the object may be this very commit.
 *   The store compares the id on the object with its own; only another writer's commit is a
 *   conflict. Reported as one, Delta would commit the same actions again at the next version:
 *   a blind append twice, or an idempotent write refused although it landed.
 * - A store that ignores If-None-Match answers 200 to both writers of one version and one commit
 *   is lost without a trace. Before its first commit to a store (bucket and endpoint), this
 *   LogStore puts a marker twice beside the commit file; if the second put succeeds the store is
 *   refused, and no commit is written.
 */
public class S3ConditionalPutLogStore extends HadoopFileSystemLogStore {

    /** User metadata that names the write which created a commit file. */
    static final String COMMIT_ID = "finalresults-commit";

    /** Tries of a conditional PUT answered 409 (another conditional PUT of the key in flight). */
    private static final int CONFLICT_TRIES = 6;

    /** Stores (bucket and endpoint) seen to refuse a second conditional PUT of one key. */
    private static final Set<String> HONOUR_IF_NONE_MATCH = ConcurrentHashMap.newKeySet();

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
        try (AuditSpan span = fs.createSpan("delta_commit", qualified.toString(), null)) {
            if (overwrite) {
                put(fs, qualified, body, Collections.emptyMap(), EnumSet.noneOf(WriteObjectFlags.class));
                return;
            }
            requireConditionalPut(fs, qualified.getParent());
            if (!putIfAbsent(fs, qualified, body)) {
                throw new FileAlreadyExistsException(path.toString());
            }
        }
    }

    /**
     * Create {@code path} holding {@code body} unless it exists: true if the object there now is
     * this call's (including a first try that landed although its answer said otherwise), false
     * if another writer's is.
     */
    private static boolean putIfAbsent(S3AFileSystem fs, Path path, byte[] body) throws IOException {
        String id = UUID.randomUUID().toString();
        for (int tried = 1; ; tried++) {
            try {
                put(fs, path, body, Collections.singletonMap(COMMIT_ID, id),
                    EnumSet.of(WriteObjectFlags.ConditionalOverwrite));
                return true;
            } catch (S3Exception e) {
                if (e.statusCode() == 409 && tried < CONFLICT_TRIES) {
                    pause(tried);  // S3's advice for 409 ConditionalRequestConflict: try again
                } else if (e.statusCode() == 412) {
                    return writtenBy(fs, path, id);
                } else {
                    throw new IOException("could not write " + path + ": " + e.getMessage(), e);
                }
            } catch (SdkException e) {  // no answer after the SDK's retries: it may have landed
                if (writtenBy(fs, path, id)) {
                    return true;
                }
                throw new IOException("could not write " + path + ": " + e.getMessage(), e);
            }
        }
    }

    /** Whether the object at {@code path} is the one written with {@code id}. */
    private static boolean writtenBy(S3AFileSystem fs, Path path, String id) throws IOException {
        try {
            return id.equals(fs.getS3AInternals().getObjectMetadata(path).metadata().get(COMMIT_ID));
        } catch (FileNotFoundException e) {
            return false;
        }
    }

    /**
     * Refuse a store that ignores If-None-Match, once per store and JVM: put a new marker in
     * {@code folder} twice; the second put must be refused.
     */
    private static void requireConditionalPut(S3AFileSystem fs, Path folder) throws IOException {
        String store = fs.getUri() + " at " + fs.getConf().getTrimmed("fs.s3a.endpoint", "AWS");
        if (HONOUR_IF_NONE_MATCH.contains(store)) {
            return;
        }
        Path marker = new Path(folder, ".put-if-absent-probe-" + UUID.randomUUID());
        byte[] empty = new byte[0];
        putIfAbsent(fs, marker, empty);
        boolean overwritten = putIfAbsent(fs, marker, empty);
        fs.delete(marker, false);
        if (overwritten) {
            throw new IOException("the S3 store " + store + " ignores If-None-Match: a second conditional PUT of "
                + marker + " succeeded, so two writers of one Delta version would both succeed and one commit "
                + "would be lost. No commit was written. Use a store that honours conditional writes, or Delta's "
                + "S3DynamoDBLogStore (docs/s3.md).");
        }
        HONOUR_IF_NONE_MATCH.add(store);
    }

    /** One PUT of {@code body} at {@code path}, built by s3a's request factory. */
    private static void put(S3AFileSystem fs, Path path, byte[] body, Map<String, String> metadata,
            EnumSet<WriteObjectFlags> flags) {
        PutObjectOptions options = new PutObjectOptions(null, metadata, flags, null);
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

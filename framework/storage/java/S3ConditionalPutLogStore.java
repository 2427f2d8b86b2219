package io.finalresults;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.S3AFileSystem;
import software.amazon.awssdk.core.sync.RequestBody;
import software.amazon.awssdk.services.s3.model.PutObjectRequest;
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
 * The S3 client is the s3a file system's own: its endpoint, credentials and per-bucket settings
 * (fs.s3a.*) apply unchanged.
 */
public class S3ConditionalPutLogStore extends HadoopFileSystemLogStore {

    public S3ConditionalPutLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        S3AFileSystem fs = (S3AFileSystem) path.getFileSystem(hadoopConf);
        StringBuilder text = new StringBuilder();
        while (actions.hasNext()) {
            text.append(actions.next()).append('\n');
        }
        PutObjectRequest.Builder put = PutObjectRequest.builder()
            .bucket(fs.getBucket())
            .key(fs.pathToKey(fs.makeQualified(path)));
        if (!overwrite) {
            put.overrideConfiguration(request -> request.putHeader("If-None-Match", "*"));
        }
        try {
            fs.getS3AInternals()
                .getAmazonS3Client("Delta commit")
                .putObject(put.build(), RequestBody.fromString(text.toString(), StandardCharsets.UTF_8));
        } catch (S3Exception e) {
            // 412: the file exists. 409: another conditional PUT of the same key is in flight.
            if (!overwrite && (e.statusCode() == 412 || e.statusCode() == 409)) {
                throw new FileAlreadyExistsException(path.toString());
            }
            throw new IOException("could not write " + path + ": " + e.getMessage(), e);
        }
    }

    /** An S3 object appears whole, or not at all. */
    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;
    }
}

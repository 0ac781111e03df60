#ifndef CORTADO_CLIBJPEG_SHIM_H
#define CORTADO_CLIBJPEG_SHIM_H
#include <stdio.h>
#include <setjmp.h>
#include <string.h>
#include <jpeglib.h>
#include <jerror.h>

/* libjpeg's default error_exit calls exit(). The error manager below jumps back into the
 * helper that made the call instead (never across a Swift frame), keeps the message, and
 * prints nothing. A premature end of data is an error here (libjpeg would only warn and pad
 * the image with gray); other warnings are ignored. */
typedef struct cortado_jpeg_error {
    struct jpeg_error_mgr base;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} cortado_jpeg_error;

/* A JPEG decode in two steps: begin (header, colour conversion, size) and finish (pixels into
 * a buffer the caller allocated), then end (always). */
typedef struct cortado_jpeg_reader {
    struct jpeg_decompress_struct cinfo;
    cortado_jpeg_error error;
    int created;
    int width;
    int height;
    /* 1 (gray) or 3 (RGB). */
    int channels;
} cortado_jpeg_reader;

static void cortado_jpeg_error_exit(j_common_ptr cinfo) {
    cortado_jpeg_error *e = (cortado_jpeg_error *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->message);
    longjmp(e->jump, 1);
}

static void cortado_jpeg_emit_message(j_common_ptr cinfo, int level) {
    if (level < 0) {
        if (cinfo->err->msg_code == JWRN_JPEG_EOF) cortado_jpeg_error_exit(cinfo);
        cinfo->err->num_warnings++;
    }
}

static void cortado_jpeg_output_message(j_common_ptr cinfo) { (void)cinfo; }

/* Reads the header and starts decompression: grayscale stays gray, YCbCr (and RGB) becomes
 * RGB; CMYK/YCCK are refused. Default DCT (JDCT_ISLOW) and fancy upsampling, as Pillow and
 * most decoders use. Returns 1 with width, height and channels set, or 0 with a message. */
static inline int cortado_jpeg_begin(cortado_jpeg_reader *r, const unsigned char *data, size_t size) {
    r->created = 0;
    r->error.message[0] = 0;
    r->cinfo.err = jpeg_std_error(&r->error.base);
    r->error.base.error_exit = cortado_jpeg_error_exit;
    r->error.base.emit_message = cortado_jpeg_emit_message;
    r->error.base.output_message = cortado_jpeg_output_message;
    if (setjmp(r->error.jump)) return 0;
    jpeg_create_decompress(&r->cinfo);
    r->created = 1;
    jpeg_mem_src(&r->cinfo, data, (unsigned long)size);
    jpeg_read_header(&r->cinfo, TRUE);
    switch (r->cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE:
        r->cinfo.out_color_space = JCS_GRAYSCALE;
        break;
    case JCS_YCbCr:
    case JCS_RGB:
        r->cinfo.out_color_space = JCS_RGB;
        break;
    default:
        strcpy(r->error.message, "CMYK and YCCK JPEG images are not supported (convert to RGB)");
        return 0;
    }
    jpeg_start_decompress(&r->cinfo);
    r->width = (int)r->cinfo.output_width;
    r->height = (int)r->cinfo.output_height;
    r->channels = r->cinfo.output_components;
    if ((unsigned long long)r->width * (unsigned long long)r->height > (1ULL << 28)) {
        strcpy(r->error.message, "image too large (more than 2^28 pixels)");
        return 0;
    }
    return 1;
}

/* Decodes every scanline into pixels (width * height * channels bytes, rows packed). */
static inline int cortado_jpeg_finish(cortado_jpeg_reader *r, unsigned char *pixels) {
    if (setjmp(r->error.jump)) return 0;
    size_t stride = (size_t)r->width * (size_t)r->channels;
    while (r->cinfo.output_scanline < r->cinfo.output_height) {
        JSAMPROW row = pixels + (size_t)r->cinfo.output_scanline * stride;
        jpeg_read_scanlines(&r->cinfo, &row, 1);
    }
    jpeg_finish_decompress(&r->cinfo);
    return 1;
}

/* Frees the decoder; safe after a failed begin. */
static inline void cortado_jpeg_end(cortado_jpeg_reader *r) {
    if (r->created) jpeg_destroy_decompress(&r->cinfo);
    r->created = 0;
}

#endif

#ifndef CORTADO_CLIBPNG_SHIM_H
#define CORTADO_CLIBPNG_SHIM_H
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

/* libpng reports errors with longjmp. Each helper below sets its own jump point before it
 * calls libpng, so a jump never crosses a Swift frame: the helper returns 0 and the message
 * is in the reader (or the caller's buffer). Warnings are dropped (no stderr output). */

/* A PNG decode in two steps: begin (header, transforms, size) and finish (pixels into a
 * buffer the caller allocated), then end (always). */
typedef struct cortado_png_reader {
    png_structp png;
    png_infop info;
    const unsigned char *data;
    size_t size;
    size_t position;
    int width;
    int height;
    /* 1 (gray) or 3 (RGB), 8 bits each. */
    int channels;
    int passes;
    char message[256];
} cortado_png_reader;

static void cortado_png_error(png_structp png, png_const_charp msg) {
    char *dst = (char *)png_get_error_ptr(png);
    if (dst != NULL) {
        strncpy(dst, msg, 255);
        dst[255] = 0;
    }
    png_longjmp(png, 1);
}

static void cortado_png_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

static void cortado_png_read_data(png_structp png, png_bytep out, size_t length) {
    cortado_png_reader *r = (cortado_png_reader *)png_get_io_ptr(png);
    if (length > r->size - r->position) png_error(png, "the data ends early (truncated PNG)");
    memcpy(out, r->data + r->position, length);
    r->position += length;
}

/* Reads the header and sets the transforms: palette and 1/2/4-bit gray expanded to 8 bits,
 * 16-bit samples scaled to 8 with rounding (v * 255 / 65535), alpha (and tRNS) dropped,
 * gamma ignored. Returns 1 with width, height and channels set, or 0 with a message. */
static inline int cortado_png_begin(cortado_png_reader *r, const unsigned char *data, size_t size) {
    r->png = NULL;
    r->info = NULL;
    r->data = data;
    r->size = size;
    r->position = 0;
    r->message[0] = 0;
    if (size < 8 || png_sig_cmp(data, 0, 8) != 0) {
        strcpy(r->message, "not a PNG file");
        return 0;
    }
    r->png = png_create_read_struct(PNG_LIBPNG_VER_STRING, r->message, cortado_png_error, cortado_png_warning);
    if (r->png == NULL) {
        strcpy(r->message, "out of memory");
        return 0;
    }
    r->info = png_create_info_struct(r->png);
    if (r->info == NULL) {
        strcpy(r->message, "out of memory");
        return 0;
    }
    if (setjmp(png_jmpbuf(r->png))) return 0;
    png_set_read_fn(r->png, r, cortado_png_read_data);
    png_read_info(r->png, r->info);
    int color = png_get_color_type(r->png, r->info);
    int depth = png_get_bit_depth(r->png, r->info);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(r->png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(r->png);
    if (depth == 16) png_set_scale_16(r->png);
    png_set_strip_alpha(r->png);
    r->passes = png_set_interlace_handling(r->png);
    png_read_update_info(r->png, r->info);
    r->width = (int)png_get_image_width(r->png, r->info);
    r->height = (int)png_get_image_height(r->png, r->info);
    r->channels = png_get_channels(r->png, r->info);
    if (png_get_bit_depth(r->png, r->info) != 8 || (r->channels != 1 && r->channels != 3))
        png_error(r->png, "unexpected pixel layout after the transforms");
    if ((unsigned long long)r->width * (unsigned long long)r->height > (1ULL << 28))
        png_error(r->png, "image too large (more than 2^28 pixels)");
    return 1;
}

/* Decodes every row into pixels (width * height * channels bytes, rows packed). */
static inline int cortado_png_finish(cortado_png_reader *r, unsigned char *pixels) {
    if (setjmp(png_jmpbuf(r->png))) return 0;
    size_t stride = (size_t)r->width * (size_t)r->channels;
    for (int pass = 0; pass < r->passes; pass++) {
        for (int y = 0; y < r->height; y++) png_read_row(r->png, pixels + (size_t)y * stride, NULL);
    }
    png_read_end(r->png, NULL);
    return 1;
}

/* Frees the reader's libpng state; safe after a failed begin. */
static inline void cortado_png_end(cortado_png_reader *r) {
    if (r->png != NULL) png_destroy_read_struct(&r->png, r->info != NULL ? &r->info : NULL, NULL);
    r->png = NULL;
    r->info = NULL;
}

/* A growing output buffer (malloc'd; the caller frees bytes). */
typedef struct cortado_png_buffer {
    unsigned char *bytes;
    size_t count;
    size_t capacity;
} cortado_png_buffer;

static void cortado_png_write_data(png_structp png, png_bytep data, size_t length) {
    cortado_png_buffer *b = (cortado_png_buffer *)png_get_io_ptr(png);
    if (length > b->capacity - b->count) {
        size_t capacity = b->capacity * 2;
        if (capacity < b->count + length) capacity = b->count + length;
        if (capacity < 4096) capacity = 4096;
        unsigned char *grown = (unsigned char *)realloc(b->bytes, capacity);
        if (grown == NULL) png_error(png, "out of memory");
        b->bytes = grown;
        b->capacity = capacity;
    }
    memcpy(b->bytes + b->count, data, length);
    b->count += length;
}

static void cortado_png_flush(png_structp png) { (void)png; }

/* Encodes 8-bit pixels (channels: 1 gray, 3 RGB, 4 RGBA; bgr != 0: stored B, G, R(, A))
 * as a non-interlaced PNG at zlib level `level`. Returns 1 with out filled, or 0 with a
 * message in message[256] (out->bytes is then NULL). */
static inline int cortado_png_encode(const unsigned char *pixels, int width, int height, int channels, int bgr, int level,
                                     cortado_png_buffer *out, char *message) {
    out->bytes = NULL;
    out->count = 0;
    out->capacity = 0;
    message[0] = 0;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, message, cortado_png_error, cortado_png_warning);
    if (png == NULL) {
        strcpy(message, "out of memory");
        return 0;
    }
    png_infop info = png_create_info_struct(png);
    if (info == NULL || setjmp(png_jmpbuf(png))) {
        if (message[0] == 0) strcpy(message, "out of memory");
        png_destroy_write_struct(&png, info != NULL ? &info : NULL);
        free(out->bytes);
        out->bytes = NULL;
        out->count = 0;
        return 0;
    }
    int color = channels == 1 ? PNG_COLOR_TYPE_GRAY : channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_RGB_ALPHA;
    png_set_write_fn(png, out, cortado_png_write_data, cortado_png_flush);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, 8, color, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_set_compression_level(png, level);
    png_write_info(png, info);
    if (bgr && channels >= 3) png_set_bgr(png);
    size_t stride = (size_t)width * (size_t)channels;
    for (int y = 0; y < height; y++) png_write_row(png, (png_const_bytep)(pixels + (size_t)y * stride));
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    return 1;
}

#endif
